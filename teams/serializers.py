from rest_framework import serializers

from mlqueue.serializer_fields import NoUnknownFields, StrictIntegerField, StrictStringField
from mlqueue.text import INVISIBLE, invisible_char
from teams.models import ApiToken, Quota, Team
from teams.resources import canonical_class, known_classes, unknown_class_message


class QuotaSerializer(serializers.ModelSerializer):
    class Meta:
        model = Quota
        fields = ["resource_class", "guaranteed", "borrowing_limit", "weight", "updated_at"]


class TeamSerializer(serializers.ModelSerializer):
    parent = serializers.CharField(source="parent.name", default=None, allow_null=True, help_text="null for a division")
    is_division = serializers.BooleanField()
    children = serializers.SerializerMethodField()
    my_role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["name", "parent", "is_division", "children", "description", "my_role"]

    def get_children(self, team: Team) -> list[str]:
        return sorted(child.name for child in self.context["children"].get(team.pk, []))

    def get_my_role(self, team: Team) -> str | None:
        return self.context["roles"].get(team.name)


NOT_A_STRING = "must be a string, not {kind}."
TOKEN_NAME_LENGTH = 100
MAX_TOKEN_DAYS = 3650


class PrintableNameField(serializers.CharField):
    """A string people read as a name: a number or a list is not coerced to one, and invisible
    or control characters are refused (mlqueue/text.py)."""

    default_error_messages = {"not_a_string": NOT_A_STRING, "invisible": INVISIBLE}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string", kind=type(data).__name__)
        value = super().to_internal_value(data)
        if char := invisible_char(value):
            self.fail("invisible", char=char)
        return value


class QuotaChangeSerializer(NoUnknownFields, serializers.Serializer):
    """No unknown field: a typo is an error, not a default. (Numbers as text pass: the teams
    page posts its form here.)"""

    guaranteed = serializers.IntegerField(required=False, min_value=0, max_value=1_000_000)
    borrowing_limit = serializers.IntegerField(required=False, min_value=0, max_value=1_000_000)
    weight = serializers.FloatField(required=False, min_value=0.01, max_value=1000)

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError("give at least one of guaranteed, borrowing_limit, weight.")
        return attrs


SAME_CLASS_TWICE = "names the same class as {other!r}: give each class once."


class QuotaPatchSerializer(NoUnknownFields, serializers.Serializer):
    """`{"reason": "...", "quotas": {"gpu:H100": {"guaranteed": 40}}}`. With `any_case` in the
    context (the API, so `mlq quota --set h100=32`) a class may be spelled in any case and
    comes back by its own name ("gpu:H100"); without it (the teams page, which posts the names
    it lists) only the exact name passes, and the refusal says the right spelling."""

    reason = PrintableNameField(min_length=1, max_length=500)  # it goes in the audit log
    quotas = serializers.DictField(child=QuotaChangeSerializer(), allow_empty=False)

    def validate_quotas(self, value):
        known = known_classes()
        named = {}
        for name in sorted(value):
            rclass = canonical_class(name, known) if self.context.get("any_case") else name
            if rclass not in known:
                raise serializers.ValidationError({name: [unknown_class_message(name, known)]})
            if rclass in named:
                raise serializers.ValidationError({name: [SAME_CLASS_TWICE.format(other=named[rclass])]})
            named[rclass] = name
        return {rclass: value[name] for rclass, name in named.items()}


class TokenCreateSerializer(NoUnknownFields, serializers.Serializer):
    """`{"username", "password", "name": "laptop", "expires_in_days": 90}`; the credentials only
    when the request is not already authenticated."""

    # Strings and an integer in the JSON sense: `"password": 123` is a 400 naming it, not a
    # wrong password (a 401 counted against the name), and `"expires_in_days": "5"` is refused
    # as every other integer field refuses a string.
    username = StrictStringField(required=False, max_length=150, trim_whitespace=False)
    password = StrictStringField(
        required=False, max_length=4096, trim_whitespace=False, write_only=True, style={"input_type": "password"}
    )
    name = PrintableNameField(min_length=1, max_length=TOKEN_NAME_LENGTH)
    expires_in_days = StrictIntegerField(required=False, allow_null=True, min_value=1, max_value=MAX_TOKEN_DAYS)


class TokenSerializer(serializers.ModelSerializer):
    """A token as its owner sees it: never the raw value, never the digest."""

    class Meta:
        model = ApiToken
        fields = ["id", "name", "hint", "created_at", "last_used_at", "expires_at", "revoked_at"]


class NewTokenSerializer(serializers.ModelSerializer):
    """The answer to a create: the one time the raw value is shown."""

    token = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "token", "hint", "created_at", "expires_at"]

    def get_token(self, token: ApiToken) -> str:
        return self.context["raw"]
