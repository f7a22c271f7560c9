"""API of teams and their cost centers, under /api/v1/teams/: read by anyone with a role, changed by finance.

    GET  /api/v1/teams/                       every team (a scoped person: theirs), with its cost center history
    POST /api/v1/teams/                       {"name", "cost_center"?, "reason"?}: a new team
    GET  /api/v1/teams/<id>/                  one team
    PATCH /api/v1/teams/<id>/                 {"name", "reason"?}: rename it
    POST /api/v1/teams/<id>/cost-center/      {"cost_center", "effective_from"?, "reason"?}: from a day on

Writes call ``catalog.teams`` (the finance role, one audit event each); a viewer's write is refused with 403 and
audited as refused; bad input answers 400 (``{"error", "detail"}``) and changes nothing.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from access.permissions import HasRole, role_required
from access.roles import Role
from access.scoping import restrict_teams
from audit.actor import Actor
from catalog import teams as team_services
from catalog.models import Team, TeamCostCenter
from ckptfleet.api_fields import FleetModelSerializer
from ckptfleet.errors import DomainError
from spend import api_examples


class CostCenterEntrySerializer(FleetModelSerializer):
    effective_from = serializers.SerializerMethodField(help_text="YYYY-MM-DD, or null for 'from the start'.")

    class Meta:
        model = TeamCostCenter
        fields = ["id", "cost_center", "effective_from", "set_by_label", "set_at", "reason"]

    def get_effective_from(self, row: TeamCostCenter) -> str | None:
        return None if row.effective_from == team_services.SINCE_EVER else row.effective_from.isoformat()


class TeamSerializer(FleetModelSerializer):
    cost_center = serializers.CharField(read_only=True, help_text="The cost center in force today.")
    history = serializers.SerializerMethodField(help_text="Its cost centers, newest first.")

    class Meta:
        model = Team
        fields = ["id", "name", "cost_center", "history"]

    @extend_schema(responses=CostCenterEntrySerializer(many=True))
    def get_history(self, team: Team) -> list[dict]:
        rows = self.context.get("history", {}).get(team.pk, [])
        return CostCenterEntrySerializer(rows, many=True).data


class TeamCreateInput(serializers.Serializer):
    # Lengths and emptiness are the service's to check: one rule, one message.
    name = serializers.CharField(allow_blank=True, trim_whitespace=False)
    cost_center = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class TeamRenameInput(serializers.Serializer):
    name = serializers.CharField(allow_blank=True, trim_whitespace=False)
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class CostCenterInput(serializers.Serializer):
    cost_center = serializers.CharField(allow_blank=True, trim_whitespace=False, help_text="Empty: none from then.")
    effective_from = serializers.DateField(
        required=False, allow_null=True, default=None, help_text="First UTC day it applies to; default today."
    )
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class CostCenterOutput(serializers.Serializer):
    team = TeamSerializer()
    entry = CostCenterEntrySerializer()
    until = serializers.DateField(allow_null=True, help_text="The day a later change takes over; null if none.")


class _FinanceWrites(APIView):
    """Reads need any role; writes the finance role, refused (403, audited) before the input is even read. The
    services check it again, whichever way in."""

    doing = "changing teams"

    def get_permissions(self):
        if self.request.method in ("GET", "HEAD", "OPTIONS"):
            return [HasRole()]
        return [role_required(Role.FINANCE, doing=self.doing)()]


def _visible(request):
    return restrict_teams(Team.objects.all(), request.user).order_by("name")


def _team_data(request, team: Team) -> dict:
    return TeamSerializer(team, context={"history": team_services.history([team.pk])}).data


def _request_id(request) -> str:
    return getattr(request, "request_id", "") or ""


class TeamListView(_FinanceWrites):
    """Every team you may see, with its cost center today and its history; finance creates teams."""

    doing = "creating a team"

    @extend_schema(
        operation_id="teams_list",
        summary="List teams and their cost centers",
        responses=TeamSerializer(many=True),
        examples=api_examples.TEAM,
    )
    def get(self, request):
        teams = list(_visible(request))
        history = team_services.history([t.pk for t in teams])
        return Response(TeamSerializer(teams, many=True, context={"history": history}).data)

    @extend_schema(
        operation_id="teams_create",
        summary="Create a team (finance role)",
        request=TeamCreateInput,
        responses={201: TeamSerializer},
        examples=api_examples.TEAM_CREATE,
    )
    def post(self, request):
        data = _valid(TeamCreateInput, request)
        team = team_services.team_create(
            actor=Actor.for_request(request),
            name=data["name"],
            cost_center=data["cost_center"],
            reason=data["reason"],
            request_id=_request_id(request),
        )
        return Response(_team_data(request, team), status=status.HTTP_201_CREATED)


class TeamDetailView(_FinanceWrites):
    """One team; finance renames it."""

    doing = "renaming a team"

    @extend_schema(
        operation_id="teams_retrieve",
        summary="A team with its cost center history",
        responses=TeamSerializer,
        examples=api_examples.TEAM,
    )
    def get(self, request, pk: int):
        return Response(_team_data(request, get_object_or_404(_visible(request), pk=pk)))

    @extend_schema(
        operation_id="teams_rename",
        summary="Rename a team (finance role)",
        request=TeamRenameInput,
        responses={200: TeamSerializer},
        examples=api_examples.TEAM_RENAME,
    )
    def patch(self, request, pk: int):
        team = get_object_or_404(_visible(request), pk=pk)
        data = _valid(TeamRenameInput, request)
        team = team_services.team_rename(
            actor=Actor.for_request(request),
            team_id=team.pk,
            name=data["name"],
            reason=data["reason"],
            request_id=_request_id(request),
        )
        return Response(_team_data(request, team))


class TeamCostCenterView(_FinanceWrites):
    """Set a team's cost center from a day on (finance role): today by default, back to the first of this month."""

    doing = "setting a team's cost center"

    @extend_schema(
        operation_id="teams_set_cost_center",
        summary="Set a team's cost center from a day (finance role)",
        request=CostCenterInput,
        responses={201: CostCenterOutput},
        examples=api_examples.TEAM_SET_COST_CENTER,
    )
    def post(self, request, pk: int):
        team = get_object_or_404(_visible(request), pk=pk)
        data = _valid(CostCenterInput, request)
        change = team_services.team_set_cost_center(
            actor=Actor.for_request(request),
            team_id=team.pk,
            cost_center=data["cost_center"],
            effective_from=data["effective_from"],
            reason=data["reason"],
            request_id=_request_id(request),
        )
        team.refresh_from_db()
        body = {
            "team": _team_data(request, team),
            "entry": CostCenterEntrySerializer(change.entry).data,
            "until": change.until.isoformat() if change.until else None,
        }
        return Response(body, status=status.HTTP_201_CREATED)


def _valid(serializer_class, request) -> dict:
    """The request's fields, or a DomainError naming the first bad one (the API's one error shape)."""
    serializer = serializer_class(data=request.data)
    if not serializer.is_valid():
        field, errors = next(iter(serializer.errors.items()))
        raise DomainError(f"{field}: {errors[0]}" if field != "non_field_errors" else str(errors[0]))
    return serializer.validated_data
