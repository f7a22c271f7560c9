"""Recovery points (``catalog.recovery_point``) and lineage (``catalog.lineage``) on pages: the fleet list of
runs over their objective, and the operator's forms for GPUs, objectives and a run's parent."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from access.middleware import request_id_of
from access.roles import Role, has_role
from access.scoping import restrict_runs, scoped_team_names
from audit.actor import Actor
from catalog.lineage import run_parent_set
from catalog.models import Run, Team
from catalog.recovery_point import DEFAULT_RPO_HOURS, over_objective, run_gpus_set, run_rpo_set, team_rpo_set
from ckptfleet.errors import DomainError


def _teams(user):
    teams = Team.objects.order_by("name")
    names = scoped_team_names(user)
    return teams.filter(name__in=sorted(names)) if names is not None else teams


@login_required
def points(request):
    """Active runs whose recovery point exceeds their objective, most GPU-hours at risk first."""
    runs = restrict_runs(Run.objects.all(), request.user)
    return render(
        request,
        "recovery/points.html",
        {
            "points": over_objective(runs),
            "teams": list(_teams(request.user)),
            "default_hours": DEFAULT_RPO_HOURS,
            "may_set": has_role(request.user, Role.OPERATOR),
        },
    )


def _run(request, pk: int) -> Run:
    return get_object_or_404(restrict_runs(Run.objects.select_related("team"), request.user), pk=pk)


def _back(request, default: str):
    target = request.POST.get("next", "")
    return redirect(target if target.startswith("/") and not target.startswith("//") else default)


def _do(request, default: str, done: str, fn, **kwargs):
    try:
        fn(
            actor=Actor.for_request(request),
            reason=request.POST.get("reason", ""),
            request_id=request_id_of(request),
            **kwargs,
        )
    except DomainError as exc:
        messages.error(request, f"Nothing was changed: {exc.message}")
    else:
        messages.success(request, done)
    return _back(request, default)


@login_required
@require_POST
def set_gpus(request, pk: int):
    run = _run(request, pk)
    value = request.POST.get("gpus", "")
    done = f"{run}: GPUs set to {value.strip()}." if value.strip() else f"{run}: the operator's GPU count is cleared."
    return _do(request, reverse("recovery:run", args=[pk]), done, run_gpus_set, run=run, gpus=value)


@login_required
@require_POST
def set_rpo(request, pk: int):
    run = _run(request, pk)
    value = request.POST.get("hours", "")
    done = f"{run}: objective set to {value.strip()} h." if value.strip() else f"{run}: its team's objective applies."
    return _do(request, reverse("recovery:run", args=[pk]), done, run_rpo_set, run=run, hours=value)


@login_required
@require_POST
def set_team_rpo(request):
    raw = request.POST.get("team", "")
    team = _teams(request.user).filter(pk=int(raw)).first() if raw.isdigit() else None
    if team is None:
        messages.error(request, "Nothing was changed: choose a team.")
        return redirect("recovery:points")
    value = request.POST.get("hours", "")
    done = (
        f"Team {team}: objective set to {value.strip()} h." if value.strip() else f"Team {team}: the default applies."
    )
    return _do(request, reverse("recovery:points"), done, team_rpo_set, team=team, hours=value)


@login_required
@require_POST
def set_parent(request, pk: int):
    run = _run(request, pk)
    value = request.POST.get("checkpoint", "").strip()
    done = f"{run}: parent checkpoint set." if value else f"{run}: parent checkpoint cleared."
    return _do(
        request, reverse("catalog:run-detail", args=[pk]), done, run_parent_set, run=run, checkpoint_id=value or None
    )
