"""mlqueue: the server's settings, URLs and Celery app, and the stdlib-only helpers jobs import
(`mlqueue.checkpoint`, `mlqueue.report`). Nothing is imported here: a job's `import mlqueue`
must not load Django or Celery. The Celery app is loaded when Django starts (scheduling/apps.py)
and by `celery -A mlqueue`, which finds `mlqueue.celery.app` itself. The node agent puts a copy
of this file on its tasks' PYTHONPATH (agents/node/runtime.py `install_helpers`)."""


def report(metrics: dict | None = None, /, *, step: int, **values) -> dict | None:
    """Report metrics at `step`: `mlqueue.report(step=100, val_loss=0.31)`, or
    `mlqueue.report({"eval/acc": 0.9}, step=100)`. One JSON line to `$MLQ_METRICS_FILE`
    (mlqueue/metrics_report.py; docs/job-metrics.md)."""
    from mlqueue.metrics_report import report as write_report  # stdlib only, loaded on first use

    return write_report(metrics, step=step, **values)
