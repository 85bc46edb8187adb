"""The Python SDK (issue 15): `from mlqueue.client import Client`.

    client = Client()                      # MLQ_SERVER / MLQ_TOKEN, else ~/.config/mlqueue/config.toml
    job = client.submit("job.yaml", set=["resources.gpu_count=16"])
    job = client.wait(job)                 # polls until SUCCEEDED, FAILED (final) or CANCELLED
    for line in client.logs(job): print(line)
    client.children(group)                 # an array's elements or a sweep's trials (docs/cli.md)

Standard library, httpx and PyYAML only: no Django, so it runs in a notebook or on a laptop.
Every refused request raises `MlqError(status, detail, fields)`, `fields` as the API's dotted paths.
`mlq` (mlqueue/cli/) is built on this.

    sdk       Client: the API's calls, waiting, logs (streamed), login
    results   what the calls return: frozen dataclasses built from the JSON, each with its `raw`
    specs     job spec files and `--set KEY=VALUE` overrides
    config    the config file (server, token, user), readable by the user alone
    errors    MlqError, every refusal"""

from mlqueue.client.config import NO_TOKEN, config_path, read_config, write_config
from mlqueue.client.errors import MlqError
from mlqueue.client.results import (
    FINISHED,
    JOB_STATES,
    NODE_STATES,
    PRIORITIES,
    CancelResult,
    Child,
    Delivery,
    DryRun,
    Event,
    Fire,
    Job,
    MaintenanceWindow,
    Node,
    QueueEntry,
    Quota,
    Schedule,
    Submitted,
    Task,
    Team,
    Token,
    Why,
)
from mlqueue.client.sdk import (
    API,
    NO_SERVER,
    NO_USER,
    POLL_S,
    UNREACHABLE,
    WAIT_TIMED_OUT,
    Client,
    server_sent_events,
)
from mlqueue.client.specs import (
    BAD_OVERRIDE,
    NOT_A_MAPPING,
    NOT_JSON_LINE,
    NOT_YAML,
    OVERRIDE_THROUGH_VALUE,
    apply_overrides,
    load_spec,
    load_specs,
    parse_override,
    read_scalar,
)

__all__ = [
    "API",
    "BAD_OVERRIDE",
    "FINISHED",
    "JOB_STATES",
    "NODE_STATES",
    "NOT_A_MAPPING",
    "NOT_JSON_LINE",
    "NOT_YAML",
    "NO_SERVER",
    "NO_TOKEN",
    "NO_USER",
    "OVERRIDE_THROUGH_VALUE",
    "POLL_S",
    "PRIORITIES",
    "UNREACHABLE",
    "WAIT_TIMED_OUT",
    "CancelResult",
    "Child",
    "Client",
    "DryRun",
    "Event",
    "Fire",
    "Job",
    "MaintenanceWindow",
    "MlqError",
    "Node",
    "QueueEntry",
    "Quota",
    "Schedule",
    "Task",
    "Team",
    "Token",
    "Delivery",
    "Why",
    "Submitted",
    "apply_overrides",
    "config_path",
    "load_spec",
    "load_specs",
    "parse_override",
    "read_config",
    "read_scalar",
    "server_sent_events",
    "write_config",
]
