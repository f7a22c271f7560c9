"""The jobs page: every scan, promotion and deletion, with live progress for the ones still running."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import render

from audit.selectors import REFUSED_TASK, refused_task_messages
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
        },
    )


@login_required
def job_progress(request):
    """``?job=scan:12&job=deletion:4``: the current state and progress of each, for the page's polling."""
    return JsonResponse({"jobs": [j.as_json() for j in jobs_by_key(request.GET.getlist("job"), user=request.user)]})
