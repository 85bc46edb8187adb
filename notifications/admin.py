"""Deliveries in the admin, read only: an operator looks into why a receiver is not told. The
users' signing secrets are not shown here (the account page shows each user their own)."""

from django.contrib import admin

from notifications.models import Delivery, NotificationSettings


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "user", "job_ref", "event", "channel", "status", "attempts", "last_status_code"]
    list_filter = ["status", "event", "channel"]
    search_fields = ["uuid", "target", "user__username"]
    readonly_fields = [field.name for field in Delivery._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(NotificationSettings)
class NotificationSettingsAdmin(admin.ModelAdmin):
    list_display = ["user", "on", "webhook", "email", "updated_at"]
    fields = ["user", "on", "webhook", "email", "secret_rotated_at", "updated_at"]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
