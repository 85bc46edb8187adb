"""The Celery app. Its one task is the fast path for grace deadlines (scheduling/tasks.py); the
leader's sweep is the guarantee."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlqueue.settings")

app = Celery("mlqueue")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
