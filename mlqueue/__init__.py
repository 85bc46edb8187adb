"""mlqueue: the server's settings, URLs and Celery app, and the stdlib-only helpers jobs import
(`mlqueue.checkpoint`). Nothing is imported here: a job's `import mlqueue.checkpoint` must not
load Django or Celery. The Celery app is loaded when Django starts (scheduling/apps.py) and by
`celery -A mlqueue`, which finds `mlqueue.celery.app` itself."""
