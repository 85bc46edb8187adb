from django.contrib import admin

from scheduling.models import Job, SchedulerLease, Task
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
class SchedulerLeaseAdmin(admin.ModelAdmin):
    list_display = ["epoch", "holder", "backend_pid", "renewed_at", "lease_seconds", "last_pass_ms", "last_pass_at"]

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
