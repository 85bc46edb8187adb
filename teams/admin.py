from django import forms
from django.contrib import admin

from teams.models import ApiToken, AuditEvent, Membership, Quota, Team
from teams.resources import known_classes, unknown_class_message
from teams.services import do_revoke_token


class QuotaForm(forms.ModelForm):
    """The class as a choice of the known ones (teams/resources.py). A quota's own class stays
    valid even once nothing configures it, so its team can still be saved."""

    class Meta:
        model = Quota
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.known = known_classes()
        current = [self.instance.resource_class] if self.instance.resource_class not in ("", *self.known) else []
        self.fields["resource_class"].widget = forms.Select(
            choices=[("", "---------"), *((rclass, rclass) for rclass in [*self.known, *current])]
        )

    def clean_resource_class(self):
        rclass = self.cleaned_data["resource_class"]
        if rclass not in self.known and rclass != self.instance.resource_class:
            raise forms.ValidationError(unknown_class_message(rclass, self.known))
        return rclass


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ["user"]


class QuotaInline(admin.TabularInline):
    model = Quota
    form = QuotaForm
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "parent", "description"]
    search_fields = ["name"]
    inlines = [QuotaInline, MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    form = QuotaForm
    list_display = ["team", "resource_class", "guaranteed", "borrowing_limit", "weight", "updated_at"]
    list_filter = ["resource_class"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["hint", "user", "name", "created_at", "last_used_at", "expires_at", "revoked_at"]
    readonly_fields = ["digest", "hint", "created_at", "last_used_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # tokens are issued by the API, /account/tokens/ or `manage.py create_token`: shown once

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        for token in queryset.filter(revoked_at__isnull=True).select_related("user"):
            do_revoke_token(token=token, actor=request.user)  # audited like a revocation through the API


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only the application writes (the audit log, the usage ledger): shown, never edited."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "kind", "job", "team", "node", "actor_name", "reason", "message"]
    list_filter = ["kind", "reason"]
    search_fields = ["message", "actor_name"]
