"""The Celery app. Its tasks are fast paths: grace deadlines and schedules' fire times
(scheduling/tasks.py); the leader's sweeps are the guarantee. Notifications
(notifications/tasks.py) are sent by Celery alone: beat's sweep is their guarantee. Beat (`celery -A mlqueue beat`)
sends the schedules' task every MLQ_SCHEDULE_BEAT_S seconds; any number of beats may run: a
fire time is claimed in the database, never twice."""

import os

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mlqueue.settings")

app = Celery("mlqueue")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# The periodic tasks `celery -A mlqueue beat` sends. Each expires after one period: a beat that
# ran while no worker did leaves no backlog of identical sweeps behind.
app.conf.beat_schedule = {
    "fire-due-schedules": {
        "task": "scheduling.tasks.fire_due_schedules",
        "schedule": settings.MLQ_SCHEDULE_BEAT_S,
        "options": {"expires": settings.MLQ_SCHEDULE_BEAT_S},
    },
    "run-due-maintenance": {
        "task": "scheduling.tasks.run_due_maintenance",
        "schedule": settings.MLQ_SCHEDULE_BEAT_S,
        "options": {"expires": settings.MLQ_SCHEDULE_BEAT_S},
    },
    "send-due-notifications": {
        "task": "notifications.tasks.send_due_notifications",
        "schedule": settings.MLQ_NOTIFY_SWEEP_S,
        "options": {"expires": settings.MLQ_NOTIFY_SWEEP_S},
    },
}
