"""`GET /api/v1/fair-share`: every team's guarantees, borrowing limits, current use and fair
share, as the teams page shows them (scheduling/usage.py), like Slurm's `sshare`.

Aggregates only: no job is named. While MLQ_QUOTAS_PUBLIC is on every signed-in user reads
every team's numbers; off, a team the caller may not read (teams.selectors.can_read_quotas)
is listed by name with its numbers null."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue.query_parameters import check_parameters
from scheduling.usage import ClusterUsage, TeamUsage, cluster_usage
from teams.selectors import quota_readable_ids


class ClassStandingSerializer(serializers.Serializer):
    resource_class = serializers.CharField()
    has_quota = serializers.BooleanField()
    guaranteed = serializers.IntegerField()
    borrowing_limit = serializers.IntegerField()
    weight = serializers.FloatField()
    used = serializers.IntegerField(help_text="units held now by assigned and running tasks")
    borrowed = serializers.IntegerField(help_text="held above the guarantee")
    lent = serializers.IntegerField(
        help_text="its part of what teams at its level borrow, out of the guarantee it leaves idle (split in "
        "proportion to what each idle team leaves idle: a level lends what it borrows)"
    )
    share = serializers.FloatField(help_text="use over entitlement in this class")


class TeamStandingSerializer(serializers.Serializer):
    name = serializers.CharField()
    parent = serializers.CharField(allow_null=True)
    readable = serializers.BooleanField(help_text="false: MLQ_QUOTAS_PUBLIC is off and this is not your team")
    dominant_share = serializers.FloatField(allow_null=True)
    classes = ClassStandingSerializer(many=True, allow_null=True)


class FairShareSerializer(serializers.Serializer):
    classes = serializers.ListField(child=serializers.CharField())
    capacity = serializers.DictField(child=serializers.IntegerField())
    teams = TeamStandingSerializer(many=True, help_text="depth first: each division, then its teams")


def _standing(team: TeamUsage, readable: bool) -> dict:
    return {
        "name": team.name,
        "parent": team.parent,
        "readable": readable,
        "dominant_share": team.dominant_share if readable else None,
        "classes": list(team.classes) if readable else None,
    }


def fair_share_answer(user, usage: ClusterUsage) -> dict:
    readable = quota_readable_ids(user)
    return {
        "classes": list(usage.classes),
        "capacity": usage.capacity,
        "teams": [_standing(team, readable is None or team.id in readable) for team in usage.teams],
    }


class FairShare(APIView):
    @extend_schema(responses=FairShareSerializer)
    def get(self, request: Request) -> Response:
        """Every team's standing in every class; it takes no parameter (`?resource_class=` is a 400)."""
        check_parameters(request.query_params, paged=False)
        return Response(FairShareSerializer(fair_share_answer(request.user, cluster_usage())).data)
