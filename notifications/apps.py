from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self):
        """Listen to the job state changes scheduling signals (it never imports this app)."""
        from notifications import services
        from scheduling import signals

        signals.job_state_changed.connect(services.record_job_state, dispatch_uid="notifications.job_state")
        signals.job_failed.connect(services.record_job_failed, dispatch_uid="notifications.job_failed")
        signals.group_state_changed.connect(services.record_group_state, dispatch_uid="notifications.group_state")
