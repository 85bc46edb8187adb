"""REST endpoints for teams and quotas, and people's own API tokens."""

from collections import defaultdict

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, generics, permissions, serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mlqueue.pagination import NewestFirst
from mlqueue.query_parameters import check_parameters
from teams.login_limits import authenticate_within_limits
from teams.models import ApiToken, AuditEvent, Team
from teams.selectors import (
    can_edit_quotas,
    can_read_quotas,
    is_site_admin,
    roles_of,
    team_history,
    token_for,
    tokens_of,
)
from teams.serializers import (
    NewTokenSerializer,
    QuotaPatchSerializer,
    QuotaSerializer,
    TeamSerializer,
    TokenCreateSerializer,
    TokenSerializer,
)
from teams.services import do_create_token, do_revoke_token, do_update_quotas

NOT_A_MEMBER = "only members of {team}, its leads and site admins may read its quotas."
NOT_A_LEAD = "only leads of {team} (or of a team above it) and site admins may change its quotas."
WRONG_CREDENTIALS = "wrong user name or password."
NO_CREDENTIALS = "log in, send a token, or give username and password to create a token."
CREDENTIAL_MISSING = "give both username and password, or neither when already logged in."
ONLY_ADMINS_LIST_OTHERS = "only site admins may list another user's tokens."
NO_SUCH_USER = "no user named {name!r}."
NO_SUCH_TOKEN = "no token {token_id} of yours."
TOKEN_CREATE_DOC = (
    "A new token, shown once. Made with a password (or a session) it expires after `expires_in_days`, "
    "or never; made with a token that expires, it expires no later than that token: without "
    "`expires_in_days` at the same time, and an `expires_in_days` past it is a 400."
)
READ_FORBIDDEN = OpenApiResponse(
    description="quotas are private (MLQ_QUOTAS_PUBLIC off) and the caller is no member of the team, "
    "of a team above it, nor a site admin"
)
NO_SUCH_TEAM = OpenApiResponse(description="no team of that name")


class TeamList(APIView):
    @extend_schema(responses=TeamSerializer(many=True))
    def get(self, request: Request) -> Response:
        check_parameters(request.query_params, paged=False)
        teams = list(Team.objects.select_related("parent"))
        children = defaultdict(list)
        for team in teams:
            children[team.parent_id].append(team)
        context = {"children": children, "roles": roles_of(request.user)}
        return Response(TeamSerializer(teams, many=True, context=context).data)


class TeamQuotas(APIView):
    @extend_schema(responses={200: QuotaSerializer(many=True), 403: READ_FORBIDDEN, 404: NO_SUCH_TEAM})
    def get(self, request: Request, name: str) -> Response:
        team = get_object_or_404(Team, name=name)
        if not can_read_quotas(request.user, team):
            raise PermissionDenied(NOT_A_MEMBER.format(team=team.name))
        check_parameters(request.query_params, paged=False)
        return Response(QuotaSerializer(team.quotas.all(), many=True).data)

    @extend_schema(
        request=QuotaPatchSerializer,
        responses={
            200: QuotaSerializer(many=True),
            400: OpenApiResponse(
                description="a bad field, named in `fields`: an unknown class, a guarantee beyond the parent's "
                "or the cluster's, a borrowing limit beyond the cluster's"
            ),
            403: OpenApiResponse(
                description="not a lead of the team (or of a team above it) nor a site admin; or, naming "
                "`quotas.<class>.weight`, a lead of the team itself: a weight is set from the team above"
            ),
            404: NO_SUCH_TEAM,
        },
    )
    def patch(self, request: Request, name: str) -> Response:
        team = get_object_or_404(Team, name=name)
        if not can_edit_quotas(request.user, team):
            raise PermissionDenied(NOT_A_LEAD.format(team=team.name))
        body = QuotaPatchSerializer(data=request.data, context={"any_case": True})
        body.is_valid(raise_exception=True)
        do_update_quotas(
            team=team, changes=body.validated_data["quotas"], user=request.user, reason=body.validated_data["reason"]
        )
        return Response(QuotaSerializer(team.quotas.all(), many=True).data)


class TeamEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_name")

    class Meta:
        model = AuditEvent
        fields = ["id", "kind", "actor", "reason", "message", "data", "created_at"]


class TeamEvents(generics.ListAPIView):
    """A team's history, newest first: its quota changes (QUOTA_CHANGED, before and after in
    `data`) for whoever may read its quotas, and the changes to its members' roles and its
    place in the tree (SECURITY) for its members (and those of teams above it) and admins."""

    serializer_class = TeamEventSerializer
    pagination_class = NewestFirst
    filter_backends = []

    def get_queryset(self):
        team = get_object_or_404(Team, name=self.kwargs["name"])
        if not can_read_quotas(self.request.user, team):
            raise PermissionDenied(NOT_A_MEMBER.format(team=team.name))
        check_parameters(self.request.query_params)
        return team_history(team, self.request.user)

    @extend_schema(responses={200: TeamEventSerializer(many=True), 403: READ_FORBIDDEN, 404: NO_SUCH_TEAM})
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)


class TokenListCreate(APIView):
    """Your API tokens; a new one for a password (rate-limited like the login) or for a
    request that is already authenticated (session or token)."""

    def get_permissions(self):
        if self.request.method == "POST":
            return [permissions.AllowAny()]
        return super().get_permissions()

    @extend_schema(
        parameters=[OpenApiParameter("user", str, description="another user's tokens (site admins only)")],
        responses=TokenSerializer(many=True),
    )
    def get(self, request: Request) -> Response:
        """Every token of yours (of `user`'s, for an admin): not a paginated list, so `cursor`
        and `limit`, like any other parameter, a repeated `user` or an empty one, are a 400."""
        check_parameters(request.query_params, filters=["user"], paged=False)
        return Response(TokenSerializer(tokens_of(_owner_to_list(request)), many=True).data)

    @extend_schema(
        request=TokenCreateSerializer,
        responses={
            201: NewTokenSerializer,
            400: OpenApiResponse(description="a bad field; made with a token: `expires_in_days` past that token's"),
        },
        description=TOKEN_CREATE_DOC,
    )
    def post(self, request: Request) -> Response:
        has_credentials = isinstance(request.data, dict) and ("username" in request.data or "password" in request.data)
        if not has_credentials and not request.user.is_authenticated:
            raise exceptions.NotAuthenticated(NO_CREDENTIALS)
        body = TokenCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        fields = body.validated_data
        owner = _owner_by_password(request, fields) if has_credentials else request.user
        made_with = request.auth if not has_credentials and isinstance(request.auth, ApiToken) else None
        token, raw = do_create_token(
            user=owner, name=fields["name"], expires_in_days=fields.get("expires_in_days"), made_with=made_with
        )
        return Response(NewTokenSerializer(token, context={"raw": raw}).data, status=status.HTTP_201_CREATED)


class TokenDetail(APIView):
    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request, token_id: str) -> Response:
        token = token_for(request.user, int(token_id))
        if token is None:
            raise exceptions.NotFound(NO_SUCH_TOKEN.format(token_id=token_id))
        do_revoke_token(token=token, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


def _owner_to_list(request: Request):
    name = request.query_params.get("user")
    if name is None or name == request.user.get_username():
        return request.user
    if not is_site_admin(request.user):
        raise PermissionDenied(ONLY_ADMINS_LIST_OTHERS)
    owner = get_user_model().objects.filter(username=name).first()
    if owner is None:
        raise exceptions.NotFound(NO_SUCH_USER.format(name=name))
    return owner


def _owner_by_password(request: Request, fields: dict):
    """The user the credentials name; the same 401 for an unknown name and a wrong password,
    and 429 while the name or the address is locked (teams/login_limits.py)."""
    for field in ("username", "password"):
        if field not in fields:
            raise exceptions.ValidationError({field: [CREDENTIAL_MISSING]})
    user = authenticate_within_limits(request, username=fields["username"], password=fields["password"])
    if user is None:
        raise exceptions.AuthenticationFailed(WRONG_CREDENTIALS)
    return user
