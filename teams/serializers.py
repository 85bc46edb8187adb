from rest_framework import serializers

from teams.models import Quota, Team
from teams.resources import known_classes, unknown_class_message


class QuotaSerializer(serializers.ModelSerializer):
    class Meta:
        model = Quota
        fields = ["resource_class", "guaranteed", "borrowing_limit", "weight", "updated_at"]


class TeamSerializer(serializers.ModelSerializer):
    parent = serializers.CharField(source="parent.name", default=None)
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


class QuotaChangeSerializer(serializers.Serializer):
    guaranteed = serializers.IntegerField(required=False, min_value=0, max_value=1_000_000)
    borrowing_limit = serializers.IntegerField(required=False, min_value=0, max_value=1_000_000)
    weight = serializers.FloatField(required=False, min_value=0.01, max_value=1000)

    def validate(self, attrs):
        if not attrs:
            raise serializers.ValidationError("give at least one of guaranteed, borrowing_limit, weight.")
        return attrs


class QuotaPatchSerializer(serializers.Serializer):
    """`{"reason": "...", "quotas": {"gpu:H100": {"guaranteed": 40}}}`"""

    reason = serializers.CharField(max_length=500)
    quotas = serializers.DictField(child=QuotaChangeSerializer(), allow_empty=False)

    def validate_quotas(self, value):
        known = known_classes()
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise serializers.ValidationError({unknown[0]: [unknown_class_message(unknown[0], known)]})
        return value
