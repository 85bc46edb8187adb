from django.contrib import admin

from scheduling import pricing
from scheduling.models import Job, Price, SchedulerLease, Task, UsageRecord
from teams.admin import ReadOnlyAdmin, ResourceClassForm
from teams.models import AuditEvent


class TaskInline(admin.TabularInline):
    model = Task
    fk_name = "job"
    extra = 0
    fields = [
        "rank",
        "state",
        "node",
        "gpu_indices",
        "attempt",
        "epoch",
        "failure_class",
        "exit_code",
        "stop_reason",
        "stop_signal",
        "kill_at",
    ]
    readonly_fields = fields
    can_delete = False


class EventInline(admin.TabularInline):
    model = AuditEvent
    fk_name = "job"
    extra = 0
    fields = ["created_at", "kind", "actor_name", "from_state", "to_state", "reason", "message"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "team",
        "owner",
        "priority",
        "state",
        "gpu_type",
        "gpu_count",
        "pending_reason_code",
        "submitted_at",
    ]
    list_filter = ["state", "priority", "gpu_type", "team"]
    search_fields = ["name", "client_job_id", "owner__username"]
    list_select_related = ["team", "owner"]
    readonly_fields = [
        "spec",
        "spec_digest",
        "state",
        "pending_reason_code",
        "pending_reason_message",
        "submitted_at",
        "started_at",
        "finished_at",
        "updated_at",
        "restarts_used",
        "retries_used",
        "preemptions",
    ]
    raw_id_fields = ["depends_on"]
    inlines = [TaskInline, EventInline]

    # A submitted job is never lost: it ends CANCELLED, it is not deleted.
    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ["job", "rank", "state", "node", "attempt", "epoch", "failure_class", "exit_code"]
    list_filter = ["state", "failure_class"]
    raw_id_fields = ["job", "node", "preempted_for"]
    readonly_fields = ["state", "attempt", "epoch"]

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(SchedulerLease)
class SchedulerLeaseAdmin(ReadOnlyAdmin):
    list_display = [
        "epoch",
        "holder",
        "backend_pid",
        "renewed_at",
        "lease_seconds",
        "last_pass_ms",
        "last_pass_at",
        "forecast_at",
        "forecast_ms",
    ]


class PriceForm(ResourceClassForm):
    """The class as a choice of the known ones."""

    class Meta:
        model = Price
        fields = ["resource_class", "gpu_hour", "cpu_hour", "effective_from"]


@admin.register(Price)
class PriceAdmin(admin.ModelAdmin):
    """Prices per class with history: a change is a new row from its date on (docs/usage.md)."""

    form = PriceForm
    list_display = ["resource_class", "effective_from", "gpu_hour", "cpu_hour", "set_by_name", "created_at"]
    list_filter = ["resource_class"]
    readonly_fields = ["set_by_name", "created_at"]

    def save_model(self, request, obj, form, change):
        obj.set_by_name = request.user.get_username()
        super().save_model(request, obj, form, change)
        pricing.audit(request.user, "PRICE_SET", f"{obj}: {obj.gpu_hour} per GPU-hour, {obj.cpu_hour} per CPU-hour")

    def delete_model(self, request, obj):
        pricing.do_remove_price(user=request.user, price=obj)


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    """The ledger, read-only: written only by the lifecycle's transitions."""

    list_display = ["job_id", "attempt", "team_name", "owner_name", "resource_class", "gpus", "started_at"]
    list_display += ["ended_at", "outcome", "lost_gpu_hours", "lost_cause"]
    list_filter = ["outcome", "lost_cause", "resource_class", "team_name"]
    search_fields = ["=job_id", "owner_name", "job_name"]
    date_hierarchy = "started_at"
