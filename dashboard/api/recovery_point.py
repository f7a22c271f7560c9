"""API of recovery points (``catalog.recovery_point``) and lineage (``catalog.lineage``).

    GET  /api/v1/runs/{id}/recovery-point/   what a restore now would lose: hours, steps, GPU-hours, vs the objective
    GET  /api/v1/recovery/points/            active runs over their objective, most GPU-hours at risk first
    POST /api/v1/runs/{id}/gpus/             {"gpus": 64 | null, "reason"?}: the operator's GPU count
    POST /api/v1/runs/{id}/rpo/              {"hours": 6 | null, "reason"?}: the run's own objective
    POST /api/v1/recovery/teams/{id}/rpo/    {"hours": 12 | null, "reason"?}: the team's default objective
    GET  /api/v1/runs/{id}/lineage/          the checkpoint it started from (and theirs), and the runs started from it
    POST /api/v1/runs/{id}/parent/           {"checkpoint": 123 | null, "reason"?}: name the parent (operator)

Setting needs the operator role (403 otherwise); bad input is a 400 that names the problem and changes nothing;
runs (and teams) a scoped person cannot see are not found.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from access.middleware import request_id_of
from access.scoping import restrict_runs, scoped_team_names
from audit.actor import Actor
from audit.choices import EventSource
from catalog.lineage import lineage_of, run_parent_set
from catalog.models import Run, Team
from catalog.recovery_point import (
    RecoveryPoint,
    over_objective,
    recovery_point_of,
    run_gpus_set,
    run_rpo_set,
    team_rpo_set,
)
from ckptfleet.api_fields import AsciiFloatField, AsciiIntegerField
from dashboard import api_examples


def _round(value: float | None, digits: int = 2) -> float | None:
    return round(value, digits) if value is not None else None


def point_dict(p: RecoveryPoint) -> dict:
    return {
        "run": p.run.pk,
        "team": p.run.team.name,
        "name": p.run.name,
        "status": p.run.status,
        "active": p.active,
        "checkpoint": p.checkpoint.pk if p.checkpoint else None,
        "label": p.checkpoint.label if p.checkpoint else None,
        "verified": p.verified,
        "saved_at": p.saved_at,
        "recovery_point_hours": _round(p.hours),
        "highest_step": p.highest_step,
        "lost_steps": p.lost_steps,
        "lost_hours": _round(p.lost_hours),
        "gpus": p.gpus,
        "gpus_source": p.gpus_source or None,
        "lost_gpu_hours": _round(p.gpu_hours, 1),
        "objective_hours": p.objective_hours,
        "objective_source": p.objective_source,
        "over_objective": p.over,
    }


POINT = inline_serializer(
    "RecoveryPoint",
    {
        "run": AsciiIntegerField(),
        "team": serializers.CharField(),
        "name": serializers.CharField(),
        "status": serializers.CharField(),
        "active": serializers.BooleanField(),
        "checkpoint": AsciiIntegerField(allow_null=True, help_text="the newest restorable checkpoint"),
        "label": serializers.CharField(allow_null=True),
        "verified": serializers.BooleanField(),
        "saved_at": serializers.DateTimeField(allow_null=True),
        "recovery_point_hours": AsciiFloatField(help_text="hours since the restorable checkpoint was saved"),
        "highest_step": AsciiIntegerField(allow_null=True),
        "lost_steps": AsciiIntegerField(allow_null=True),
        "lost_hours": AsciiFloatField(help_text="wall hours of training a restore now would lose"),
        "gpus": AsciiIntegerField(allow_null=True),
        "gpus_source": serializers.CharField(allow_null=True, help_text="sidecar, world size or operator"),
        "lost_gpu_hours": AsciiFloatField(allow_null=True),
        "objective_hours": AsciiFloatField(),
        "objective_source": serializers.CharField(help_text="run, team or default"),
        "over_objective": serializers.BooleanField(),
    },
)

_SET_RESPONSES = {
    400: OpenApiResponse(description="bad input (e.g. a negative GPU count, an objective of 0 hours): nothing changed"),
    403: OpenApiResponse(description="a person without the operator role"),
    404: OpenApiResponse(description="no such run or team (or one the person is not scoped to)"),
}


def _run(request, pk: int) -> Run:
    return get_object_or_404(restrict_runs(Run.objects.select_related("team"), request.user), pk=pk)


def _data(request) -> dict:
    return request.data if isinstance(request.data, dict) else {}


def _actor(request) -> Actor:
    return Actor.for_request(request, EventSource.API)


class RunRecoveryPointView(APIView):
    @extend_schema(summary="A run's recovery point: what a restore now would lose", responses={200: POINT})
    def get(self, request, pk: int):
        """Hours since its newest restorable checkpoint; the steps, wall hours and GPU-hours a restore loses;
        its GPUs with their source; its objective and whether it is exceeded."""
        return Response(point_dict(recovery_point_of(_run(request, pk))))


class FleetRecoveryPointsView(APIView):
    @extend_schema(
        summary="Active runs whose recovery point exceeds their objective, worst first",
        responses={200: inline_serializer("RecoveryPoints", {"results": serializers.ListField(child=POINT)})},
    )
    def get(self, request):
        """Most GPU-hours at risk first; runs of unknown GPU count after, by hours."""
        runs = restrict_runs(Run.objects.all(), request.user)
        return Response({"results": [point_dict(p) for p in over_objective(runs)]})


class RunGpusView(APIView):
    @extend_schema(
        summary="Set the GPU count of a run (operator)",
        request=inline_serializer(
            "RunGpus", {"gpus": AsciiIntegerField(allow_null=True), "reason": serializers.CharField()}
        ),
        responses={200: POINT, **_SET_RESPONSES},
        examples=api_examples.RUN_GPUS,
    )
    def post(self, request, pk: int):
        """Used when neither the sidecar nor the checkpoint's world size says it; null clears it. Audited."""
        run = _run(request, pk)
        data = _data(request)
        run_gpus_set(
            run=run,
            gpus=data.get("gpus"),
            reason=data.get("reason", ""),
            actor=_actor(request),
            request_id=request_id_of(request),
        )
        return Response(point_dict(recovery_point_of(_run(request, pk))))


class RunRpoView(APIView):
    @extend_schema(
        summary="Set a run's own recovery point objective (operator)",
        request=inline_serializer(
            "RunRpo", {"hours": AsciiFloatField(allow_null=True), "reason": serializers.CharField()}
        ),
        responses={200: POINT, **_SET_RESPONSES},
        examples=api_examples.RUN_RPO,
    )
    def post(self, request, pk: int):
        """Hours above 0; null falls back to the team's objective. Audited as run.rpo."""
        run = _run(request, pk)
        data = _data(request)
        run_rpo_set(
            run=run,
            hours=data.get("hours"),
            reason=data.get("reason", ""),
            actor=_actor(request),
            request_id=request_id_of(request),
        )
        return Response(point_dict(recovery_point_of(_run(request, pk))))


class TeamRpoView(APIView):
    @extend_schema(
        summary="Set a team's default recovery point objective (operator)",
        request=inline_serializer(
            "TeamRpo", {"hours": AsciiFloatField(allow_null=True), "reason": serializers.CharField()}
        ),
        responses={
            200: inline_serializer(
                "TeamRpoResult",
                {
                    "team": AsciiIntegerField(),
                    "name": serializers.CharField(),
                    "rpo_hours": AsciiFloatField(),
                },
            ),
            **_SET_RESPONSES,
        },
        examples=api_examples.TEAM_RPO,
    )
    def post(self, request, pk: int):
        """Hours above 0; null falls back to the product default. Audited as team.rpo."""
        teams = Team.objects.all()
        names = scoped_team_names(request.user)
        if names is not None:
            teams = teams.filter(name__in=sorted(names))
        team = get_object_or_404(teams, pk=pk)
        data = _data(request)
        team = team_rpo_set(
            team=team,
            hours=data.get("hours"),
            reason=data.get("reason", ""),
            actor=_actor(request),
            request_id=request_id_of(request),
        )
        return Response({"team": team.pk, "name": team.name, "rpo_hours": team.rpo_hours})


def lineage_dict(run: Run, user) -> dict:
    lineage = lineage_of(run, user)
    return {
        "run": run.pk,
        "parent_source": lineage.parent_source or None,
        "parent_ref": lineage.parent_ref or None,
        "parent_hidden": lineage.hidden_parent,
        "parents": [
            {"checkpoint": c.pk, "label": c.label, "run": c.run_id, "team": c.run.team.name, "name": c.run.name}
            for c in lineage.parents
        ],
        "children": [
            {
                "run": r.pk,
                "team": r.team.name,
                "name": r.name,
                "checkpoint": r.parent_checkpoint_id,
                "label": r.parent_checkpoint.label if r.parent_checkpoint else None,
            }
            for r in lineage.children
        ],
    }


LINEAGE = inline_serializer(
    "Lineage",
    {
        "run": AsciiIntegerField(),
        "parent_source": serializers.CharField(allow_null=True, help_text="sidecar or operator"),
        "parent_ref": serializers.CharField(allow_null=True, help_text="team/run@step as said"),
        "parent_hidden": serializers.BooleanField(),
        "parents": serializers.ListField(child=serializers.DictField(), help_text="nearest first"),
        "children": serializers.ListField(child=serializers.DictField()),
    },
)


class RunLineageView(APIView):
    @extend_schema(
        summary="A run's parent checkpoints and the runs started from its checkpoints", responses={200: LINEAGE}
    )
    def get(self, request, pk: int):
        """Parents nearest first (as far as the person may see); children of any of its checkpoints."""
        return Response(lineage_dict(_run(request, pk), request.user))


class RunParentView(APIView):
    @extend_schema(
        summary="Name the checkpoint a run was initialised or fine-tuned from (operator)",
        request=inline_serializer(
            "RunParent", {"checkpoint": AsciiIntegerField(allow_null=True), "reason": serializers.CharField()}
        ),
        responses={200: LINEAGE, **_SET_RESPONSES},
        examples=api_examples.RUN_PARENT,
    )
    def post(self, request, pk: int):
        """A checkpoint id the person can see; null clears it. Audited as run.parent."""
        run = _run(request, pk)
        data = _data(request)
        run_parent_set(
            run=run,
            checkpoint_id=data.get("checkpoint"),
            reason=data.get("reason", ""),
            actor=_actor(request),
            request_id=request_id_of(request),
        )
        return Response(lineage_dict(_run(request, pk), request.user))
