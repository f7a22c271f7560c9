"""The API a training job calls at its end to say how its run ended (``catalog.lifecycle``).

    POST /api/v1/runs/{id}/status/   {"status", "reason"?}
    POST /api/v1/runs/status/        {"team", "run", "status", "reason"?}: for a job that knows its names only

With a person's token (``cfu_``) the person needs the operator role, and a run of a team they are not scoped
to is not found. With a host's token (``cfh_``) the host may set the status only of runs with a copy at one
of its own locations (403 otherwise). Either way the change is audited as ``run.status``, source "api".
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from access.middleware import request_id_of
from access.scoping import restrict_runs
from audit.actor import Actor
from audit.choices import EventSource
from catalog.choices import RunStatusSource
from catalog.lifecycle import MAX_STATUS_REASON, run_status_set
from catalog.models import Run
from ckptfleet.api_fields import FleetModelSerializer
from ckptfleet.errors import DomainError
from ckptfleet.params import parse_id
from dashboard import api_examples
from fleet.api.auth import HostPrincipal, HostTokenAuthentication


class RunStatusSerializer(serializers.Serializer):
    status = serializers.CharField(help_text="active, finished, failed, abandoned or deleted.")
    reason = serializers.CharField(
        required=False, allow_blank=True, default="", help_text=f"Why, at most {MAX_STATUS_REASON} characters."
    )


class RunStatusByNameSerializer(RunStatusSerializer):
    team = serializers.CharField(help_text="The team's name.")
    run = serializers.CharField(help_text="The run's name within its team.")


class RunStatusResultSerializer(FleetModelSerializer):
    team = serializers.CharField(source="team.name")
    changed = serializers.BooleanField(help_text="False when the run already had this status: nothing was written.")

    class Meta:
        model = Run
        fields = [
            "id",
            "team",
            "name",
            "status",
            "status_source",
            "status_changed_at",
            "status_reason",
            "status_by_label",
            "changed",
        ]


def _text(data, name: str) -> str:
    value = data.get(name) if isinstance(data, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise DomainError(f"{name} is required (text)", code="required")
    return value.strip()


class _RunStatusView(APIView):
    authentication_classes = [HostTokenAuthentication, *APIView.authentication_classes]

    def _runs(self, request):
        runs = Run.objects.select_related("team")
        if isinstance(request.user, HostPrincipal):
            return runs  # the service lets a host speak only for runs it stores
        return restrict_runs(runs, request.user)

    def _actor(self, request) -> Actor:
        if isinstance(request.user, HostPrincipal):
            return Actor.agent(request.user.host.name)
        return Actor.for_request(request, EventSource.API)

    def _set(self, request, run: Run) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        change = run_status_set(
            run=run,
            status=_text(data, "status"),
            reason=data.get("reason", ""),
            actor=self._actor(request),
            source=RunStatusSource.API,
            request_id=request_id_of(request),
        )
        change.run.changed = change.changed
        return Response(RunStatusResultSerializer(change.run).data)


_RESPONSES = {
    200: RunStatusResultSerializer,
    400: OpenApiResponse(description="an unknown status, a reason too long: nothing changed"),
    403: OpenApiResponse(description="a person without the operator role, or a host that stores no copy of the run"),
    404: OpenApiResponse(description="no such run (or one of a team the person is not scoped to)"),
}


class RunStatusView(_RunStatusView):
    @extend_schema(
        summary="Set a run's status (finished, failed, abandoned, active)",
        operation_id="runs_status_set",
        request=RunStatusSerializer,
        responses=_RESPONSES,
        examples=api_examples.RUN_STATUS,
    )
    def post(self, request, pk: int):
        """Say how the run ended (or that it is active again), with a reason; audited as ``run.status``."""
        run = self._runs(request).filter(pk=parse_id(pk, "run")).first()
        if run is None:
            raise DomainError(f"run {pk} does not exist", code="not_found", http_status=404)
        return self._set(request, run)


class RunStatusByNameView(_RunStatusView):
    @extend_schema(
        summary="Set a run's status by team and run name",
        operation_id="runs_status_set_by_name",
        request=RunStatusByNameSerializer,
        responses=_RESPONSES,
        examples=api_examples.RUN_STATUS_BY_NAME,
    )
    def post(self, request):
        """As ``POST /api/v1/runs/{id}/status/``, for a job that knows its team and run names but not the id."""
        data = request.data if isinstance(request.data, dict) else {}
        team, name = _text(data, "team"), _text(data, "run")
        run = self._runs(request).filter(team__name=team, name=name).first()
        if run is None:
            raise DomainError(f"run {team}/{name} does not exist", code="not_found", http_status=404)
        return self._set(request, run)
