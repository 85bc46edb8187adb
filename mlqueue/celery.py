"""The Celery app: grace timers, agent callbacks, back-off release, reports."""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlqueue.settings")

app = Celery("mlqueue")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
