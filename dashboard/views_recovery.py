"""The on-call recovery view: pick a run, see what to restore, from where, how long it takes, and protect it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from access.roles import Role, has_role
from access.scoping import restrict_runs
from actions import protection, services
from actions.leases import live as live_leases
from actions.models import DeletionJob
from audit.actor import Actor
from catalog import selectors
from catalog.ladder import ladder_for
from catalog.models import Checkpoint, Run
from catalog.pointers import pointers_for_run
from catalog.recovery_model import recovery_of
from catalog.reshard import layout_of
from ckptfleet.errors import DomainError
from ckptfleet.params import parse_id
from dashboard.host_forms import mark_host_from_form
from fleet.models import Host

MATCHES_SHOWN = 20


@login_required
def search(request):
    """Keyboard first: the box has focus; one match goes straight to it, several are listed."""
    q = request.GET.get("q", "").strip()[:200]
    runs = []
    if q:
        found = list(restrict_runs(selectors.run_search(q=q), request.user)[: MATCHES_SHOWN + 1])
        exact = [r for r in found if r.name == q or f"{r.team.name}/{r.name}" == q]
        if len(found) == 1 or len(exact) == 1:
            return redirect("recovery:run", pk=(exact or found)[0].pk)
        runs = found[:MATCHES_SHOWN]
    return render(
        request,
        "recovery/search.html",
        {"q": q, "runs": runs, "more": q and len(runs) == MATCHES_SHOWN},
    )


def _run(request, pk: int) -> Run:
    return get_object_or_404(restrict_runs(Run.objects.select_related("team"), request.user), pk=pk)


def _gpus(value: str | None) -> int | None:
    """The GPU count asked about: a whole number from 1 to a million; anything else is not asked."""
    value = (value or "").strip()
    if not value.isdigit() or not 1 <= int(value) <= 1_000_000:
        return None
    return int(value)


@login_required
def run(request, pk: int):
    the_run = _run(request, pk)
    # The run's recovery model, computed once: the headline, the cards, the copies, "Pin and hold" and the ladder.
    point, recovery = recovery_of(the_run)
    layout = layout_of(recovery.best.copy) if recovery.best is not None else None
    gpus = _gpus(request.GET.get("gpus"))
    gpus_error = "GPUs left must be a whole number from 1 to 1,000,000" if request.GET.get("gpus") and not gpus else ""
    held = pinned = False
    holds = []
    deletions, leases = [], []
    if recovery.checkpoint is not None:
        # "Is anything about to delete it?": open deletions of it, and the leases that keep it.
        deletions = list(
            DeletionJob.objects.filter(checkpoint=recovery.checkpoint, state__in=protection.OPEN_DELETION_STATES)
            .select_related("copy__location")
            .order_by("execute_after")[:5]
        )
        leases = list(live_leases([recovery.checkpoint.pk]).order_by("expires_at")[:5])
        holds = list(protection.active_holds(recovery.checkpoint).order_by("placed_at"))
        held = bool(holds)
        pinned = protection.is_pinned(recovery.checkpoint)
    return render(
        request,
        "recovery/run.html",
        {
            "run": the_run,
            "recovery": recovery,
            "pointers": pointers_for_run(the_run),
            "deletions": deletions,
            "leases": leases,
            "ladder": ladder_for(the_run, point=point),
            "recovery_point": point,
            "layout": layout,
            "gpus": gpus,
            "gpus_error": gpus_error,
            "loads_on": layout.loads_on(gpus) if layout is not None and gpus else None,
            "held": held,
            "holds": holds,
            "pinned": pinned,
            "may_protect": has_role(request.user, Role.OPERATOR),
        },
    )


@login_required
@require_POST
def protect(request, pk: int):
    """Pin and hold the checkpoint for the incident: two audited actions in one transaction."""
    the_run = _run(request, pk)
    try:
        checkpoint = Checkpoint.objects.get(pk=parse_id(request.POST.get("checkpoint", ""), "checkpoint"), run=the_run)
    except Checkpoint.DoesNotExist:
        raise Http404("no such checkpoint in this run") from None
    reason = request.POST.get("reason", "")
    incident = request.POST.get("case_ref", "")
    actor = Actor.for_request(request)
    done = []
    try:
        with transaction.atomic():
            if not protection.is_pinned(checkpoint):
                services.pin(checkpoint=checkpoint, reason=reason, actor=actor)
                done.append("pinned")
            held_for_case = protection.active_holds(checkpoint).filter(case_ref=incident.strip()).exists()
            if not held_for_case:
                services.hold(run=the_run, checkpoint=checkpoint, reason=reason, case_ref=incident, actor=actor)
                done.append(f"held for {incident.strip()}")
    except DomainError as exc:
        messages.error(request, f"Nothing was changed: {exc.message}")
    else:
        if done:
            messages.success(request, f"{checkpoint.label} is now {' and '.join(done)}. No deletion can touch it.")
        else:
            messages.info(request, f"{checkpoint.label} was already pinned and held for {incident.strip()}.")
    return redirect(reverse("recovery:run", args=[the_run.pk]) + "#protect")


@login_required
@require_POST
def host_state(request, pk: int, host_id: int):
    """Mark a host of one of the run's copies down (its copies leave the restore ranking) or up again; audited."""
    the_run = _run(request, pk)
    host = Host.objects.filter(pk=host_id, locations__copies__checkpoint__run=the_run).distinct().first()
    if host is None:
        raise Http404("no host holds a copy of this run")
    mark_host_from_form(request, host)
    return redirect(reverse("recovery:run", args=[the_run.pk]) + "#copies-title")
