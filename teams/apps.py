from django.apps import AppConfig


class TeamsConfig(AppConfig):
    name = "teams"
    verbose_name = "Teams, quotas and access"

    def ready(self):
        from teams import schema  # noqa: F401  registers the OpenAPI auth scheme
        from teams.authentication import forget_on_change

        forget_on_change()
