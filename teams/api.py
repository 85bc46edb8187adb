"""REST endpoints for teams and quotas."""

from collections import defaultdict

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from teams.models import Team
from teams.selectors import can_edit_quotas, is_member, roles_of
from teams.serializers import QuotaPatchSerializer, QuotaSerializer, TeamSerializer
from teams.services import do_update_quotas

NOT_A_MEMBER = "only members of {team}, its leads and site admins may read its quotas."
NOT_A_LEAD = "only leads of {team} (or of a team above it) and site admins may change its quotas."


class TeamList(APIView):
    @extend_schema(responses=TeamSerializer(many=True))
    def get(self, request: Request) -> Response:
        teams = list(Team.objects.select_related("parent"))
        children = defaultdict(list)
        for team in teams:
            children[team.parent_id].append(team)
        context = {"children": children, "roles": roles_of(request.user)}
        return Response(TeamSerializer(teams, many=True, context=context).data)


class TeamQuotas(APIView):
    @extend_schema(responses=QuotaSerializer(many=True))
    def get(self, request: Request, name: str) -> Response:
        team = get_object_or_404(Team, name=name)
        if not is_member(request.user, team):
            raise PermissionDenied(NOT_A_MEMBER.format(team=team.name))
        return Response(QuotaSerializer(team.quotas.all(), many=True).data)

    @extend_schema(request=QuotaPatchSerializer, responses=QuotaSerializer(many=True))
    def patch(self, request: Request, name: str) -> Response:
        team = get_object_or_404(Team, name=name)
        if not can_edit_quotas(request.user, team):
            raise PermissionDenied(NOT_A_LEAD.format(team=team.name))
        body = QuotaPatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        do_update_quotas(
            team=team, changes=body.validated_data["quotas"], user=request.user, reason=body.validated_data["reason"]
        )
        return Response(QuotaSerializer(team.quotas.all(), many=True).data)
