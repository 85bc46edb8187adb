"""`mlq`, the command line (issue 15), built on the SDK (mlqueue.client): no Django.

Exit codes: 0 done, 1 the server refused (its detail, then each field's error as `field: message`),
2 a usage error (click's), 130 interrupted (Ctrl-C), and `submit --wait`: 0 succeeded, 1 failed,
3 cancelled; `submit --dry-run` 1 when it can never run, `cancel` 1 when a job was skipped.

    app       the click group `main`, its client, refusals as exit code 1
    output    -o table/wide/json/yaml and the one-line reports
    columns   the jobs' table columns
    account   login, tokens, shell completion
    jobs      submit and the verbs that read jobs (queue, jobs, status, why, logs, events)
    control   the verbs that change a job (cancel, hold, release, requeue, set)
    groups    arrays and sweeps: --array's syntax, group summaries, `mlq children`
    cluster   teams, quotas, nodes and the node verbs (cordon, drain, uncordon, include-gpus)
    node      `mlq node NAME`: one node's telemetry, tasks, windows and history (admins)
    schedules `mlq schedules list|show|create|suspend|resume|run|delete`
    metrics   `mlq metrics`: what a job reported with mlqueue.report
    usage     `mlq usage`: hours, cost, lost work and queue waits from the usage ledger
    notifications `mlq notifications`: the delivery log
    maintenance `mlq maintenance`: maintenance windows (admins): list, show, create, change, cancel"""

from mlqueue.cli import (  # noqa: F401 (each registers its verbs on main)
    account,
    cluster,
    control,
    groups,
    jobs,
    maintenance,
    metrics,
    node,
    notifications,
    schedules,
    usage,
)
from mlqueue.cli.app import main

__all__ = ["main"]
