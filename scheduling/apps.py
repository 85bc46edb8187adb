from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Jobs and scheduling"

    def ready(self):
        from scheduling import secrets  # noqa: F401  registers its system checks (keys, check --deploy)
