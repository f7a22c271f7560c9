"""The jobs page: every scan, promotion and deletion, with live progress for the ones still running."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from access.roles import Role, has_role
from audit.actor import Actor
from audit.selectors import REFUSED_TASK, refused_task_messages
from ckptfleet.errors import DomainError
from dashboard import periodic
from dashboard.jobs import KINDS, STATES, jobs_by_key, recent_jobs

JOBS_SHOWN = 100
REFUSED_SHOWN = 10


@login_required
def job_list(request):
    kind = request.GET.get("kind", "")
    kind = kind if kind in KINDS else ""
    state = request.GET.get("state", "")
    state = state if state in STATES else ""
    jobs = recent_jobs(kind=kind, state=state, limit=JOBS_SHOWN, user=request.user)
    return render(
        request,
        "jobs/list.html",
        {
            "jobs": jobs,
            "kind": kind,
            "state": state,
            "kinds": KINDS.items(),
            "states": STATES.items(),
            "limit": JOBS_SHOWN,
            "any_active": any(j.active for j in jobs),
            # Task messages that kept killing their worker and were refused (ckptfleet.deliveries).
            "refused": list(refused_task_messages(limit=REFUSED_SHOWN)),
            "refused_action": REFUSED_TASK,
            "max_deliveries": settings.TASK_MAX_DELIVERIES,
            # An admin may run the periodic work now (scans due, deletions whose grace ended, promotions to poll).
            "can_run_due": has_role(request.user, Role.ADMIN),
            "periodic": periodic.entries(),
            "periodic_in_process": periodic.in_process(),
        },
    )


@login_required
@require_POST
def run_due_now(request):
    """Every periodic task now, for an admin: one audited event, then each run in-process or sent to the workers."""
    try:
        outcomes = periodic.run_now(actor=Actor.for_request(request), request_id=getattr(request, "request_id", ""))
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect("jobs:list")
    failed = [o for o in outcomes if o.state == "failed"]
    queued = [o for o in outcomes if o.state == "queued"]
    if failed:
        names = ", ".join(o.entry.name for o in failed)
        messages.error(request, f"{len(failed)} of {len(outcomes)} periodic tasks failed ({names}); the log says why.")
    elif queued:
        messages.success(request, f"{len(queued)} periodic tasks sent to the workers; their jobs appear below.")
    else:
        messages.success(request, f"{len(outcomes)} periodic tasks ran; what they started is listed below.")
    return redirect("jobs:list")


@login_required
def job_progress(request):
    """``?job=scan:12&job=deletion:4``: the current state and progress of each, for the page's polling."""
    return JsonResponse({"jobs": [j.as_json() for j in jobs_by_key(request.GET.getlist("job"), user=request.user)]})
