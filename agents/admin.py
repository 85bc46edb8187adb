from django.contrib import admin

from agents.models import JoinToken
from agents.tokens import do_revoke_join_token
from scheduling.models import Node


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "zone",
        "rack",
        "gpu_type",
        "gpu_count",
        "cpu_count",
        "memory_gb",
        "state",
        "state_reason",
        "task_isolation",
    ]
    list_filter = ["state", "zone", "gpu_type"]
    search_fields = ["name", "rack"]
    exclude = ["token_digest"]

    # Read-only here (QA): a state set in this form was written with no audit entry, and a
    # "draining" node stopped nothing. Nodes change through the console, the API and `mlq`
    # (cordon, drain, uncordon, labels, reset-token: audited, with their effects); what a node
    # is comes from its agent.
    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False


@admin.register(JoinToken)
class JoinTokenAdmin(admin.ModelAdmin):
    """Read-only here: tokens are made with `manage.py create_join_token` (shown once) and
    revoked with the action below, which is audited."""

    list_display = ["hint", "name", "created_by", "created_at", "expires_at", "uses", "max_uses", "revoked_at"]
    readonly_fields = [
        "name",
        "digest",
        "hint",
        "created_by",
        "created_at",
        "expires_at",
        "max_uses",
        "uses",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Revoke the selected join tokens")
    def revoke(self, request, queryset):
        revoked = sum(
            do_revoke_join_token(token=token, revoked_by=request.user.get_username(), actor=request.user)
            for token in queryset
        )
        self.message_user(request, f"revoked {revoked} join token(s)")
