from django.apps import AppConfig


class ServerConfig(AppConfig):
    """The project itself as an app: no models, only its system checks."""

    name = "mlqueue"
    verbose_name = "mlqueue server"

    def ready(self):
        from mlqueue import checks  # noqa: F401  registers mlqueue's `check --deploy` warnings
