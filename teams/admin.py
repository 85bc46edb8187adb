from django import forms
from django.contrib import admin
from rest_framework.exceptions import ValidationError as DRFValidationError

from teams.models import ApiToken, AuditEvent, Membership, Quota, Team
from teams.resources import known_classes, unknown_class_message
from teams.services import check_quota_tree, do_revoke_token
from teams.team_changes import do_delete_team, do_remove_membership, do_save_membership, do_save_team


class ResourceClassForm(forms.ModelForm):
    """The class as a choice of the known ones (teams/resources.py), for a model with a
    `resource_class` (a price). A row's own class stays valid even once nothing configures it,
    so it can still be saved."""

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


class ShownNotEdited:
    """An admin (or inline) that shows its rows and never adds, changes or deletes one."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class QuotaInline(ShownNotEdited, admin.TabularInline):
    """Shown, not edited here: a quota changes through the teams page, the API or `mlq quota`,
    which keep the tree consistent (a team within its parent) and write the audit log."""

    model = Quota
    extra = 0


class TeamForm(forms.ModelForm):
    class Meta:
        model = Team
        fields = "__all__"

    def clean(self):
        """A team moved under another parent must fit its guarantees in the new one's."""
        data = super().clean()
        team = self.instance
        if team.pk is not None and "parent" in self.changed_data and not self.errors:
            team.parent = data.get("parent")
            for quota in team.quotas.all():
                try:
                    check_quota_tree(team=team, rclass=quota.resource_class, guaranteed=quota.guaranteed)
                except DRFValidationError as exc:
                    raise forms.ValidationError(
                        {"parent": [str(message) for messages in exc.detail.values() for message in messages]}
                    ) from None
        return data


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """A team's creation, move and deletion, and its inline memberships, are audited
    (teams/team_changes.py); its quotas are shown, not edited."""

    form = TeamForm
    list_display = ["name", "parent", "description"]
    search_fields = ["name"]
    inlines = [QuotaInline, MembershipInline]

    def save_model(self, request, obj, form, change):
        do_save_team(team=obj, actor=request.user)

    def delete_model(self, request, obj):
        do_delete_team(team=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for team in queryset.select_related("parent"):
            do_delete_team(team=team, actor=request.user)

    def save_formset(self, request, form, formset, change):
        if formset.model is not Membership:
            return super().save_formset(request, form, formset, change)
        saved = formset.save(commit=False)  # nothing written yet: each goes through the service
        for membership in formset.deleted_objects:
            do_remove_membership(membership=membership, actor=request.user)
        for membership in saved:
            do_save_membership(membership=membership, actor=request.user)
        return None


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    """Memberships added, changed or removed here go through teams/team_changes.py, which writes
    each one's audit entry (role before -> after, by whom)."""

    list_display = ["user", "team", "role"]
    list_filter = ["role", "team"]

    def save_model(self, request, obj, form, change):
        do_save_membership(membership=obj, actor=request.user)

    def delete_model(self, request, obj):
        do_remove_membership(membership=obj, actor=request.user)

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("user", "team"):
            do_remove_membership(membership=membership, actor=request.user)


@admin.register(Quota)
class QuotaAdmin(ShownNotEdited, admin.ModelAdmin):
    """Shown, not edited here (see `QuotaInline`)."""

    list_display = ["team", "resource_class", "guaranteed", "borrowing_limit", "weight", "updated_at"]
    list_filter = ["resource_class"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["hint", "user", "name", "created_at", "last_used_at", "expires_at", "revoked_at"]
    # Whose it is and until when are set when it is issued; a revocation goes through the
    # audited action below (moving a token to another user, or reviving a revoked or expired
    # one, here was an unaudited takeover).
    readonly_fields = ["digest", "hint", "user", "created_at", "last_used_at", "expires_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False  # tokens are issued by the API, /account/tokens/ or `manage.py create_token`: shown once

    # A deleted token stopped working with no entry in the audit log: a live one is revoked
    # (audited) before it goes. Refusing deletes outright also refused deleting any user who
    # had a token, revoked or not (the admin checks delete permission on what cascades).
    def delete_model(self, request, obj):
        self.delete_queryset(request, ApiToken.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        self.revoke(request, queryset)
        queryset.delete()

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        for token in queryset.filter(revoked_at__isnull=True).select_related("user"):
            do_revoke_token(token=token, actor=request.user)  # audited like a revocation through the API


class ReadOnlyAdmin(ShownNotEdited, admin.ModelAdmin):
    """Rows only the application writes (the audit log, the usage ledger): shown, never edited."""


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "kind", "job", "team", "node", "actor_name", "reason", "message"]
    list_filter = ["kind", "reason"]
    search_fields = ["message", "actor_name"]
