from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Jobs and scheduling"

    def ready(self):
        # The Celery app, loaded with Django (not by `import mlqueue`, which jobs do for
        # mlqueue.checkpoint): @shared_task tasks then bind to it in every process.
        import mlqueue.celery  # noqa: F401
        from scheduling import secrets  # noqa: F401  registers its system checks (keys, check --deploy)
