"""The actions panel on run and checkpoint pages: what protects the thing, and the forms to act on it.

``{% load actions_tags %}{% actions_panel checkpoint %}`` (or ``run``). A fixed number of queries,
whatever the size of the run: holds, pins and open deletions are each one query, capped.
"""

from __future__ import annotations

from datetime import timedelta

from django import template
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from access.roles import Role, has_role
from actions import promises
from actions.models import HOLD_MODE_HELP, DeletionJob, Hold, HoldMode, Lease, LeasePurpose, Pin
from actions.protection import OPEN_DELETION_STATES
from actions.services import may_release
from catalog.models import Checkpoint, CheckpointCopy, Run

register = template.Library()

LISTED = 20


@register.inclusion_tag("actions/_panel.html", takes_context=True)
def actions_panel(context, target):
    request = context.get("request")
    user = getattr(request, "user", None)
    if isinstance(target, Run):
        run, checkpoint = target, None
    elif isinstance(target, Checkpoint):
        run, checkpoint = target.run, target
    else:
        raise template.TemplateSyntaxError("actions_panel takes a run or a checkpoint")
    holds = Hold.objects.filter(run=run, released_at__isnull=True).select_related("checkpoint")
    pins = Pin.objects.filter(unpinned_at__isnull=True).select_related("checkpoint")
    deletions = DeletionJob.objects.filter(state__in=OPEN_DELETION_STATES).select_related(
        "checkpoint", "copy__location"
    )
    copies = []
    if checkpoint is not None:
        holds = holds.filter(Q(checkpoint__isnull=True) | Q(checkpoint=checkpoint))
        pins = pins.filter(checkpoint=checkpoint)
        deletions = deletions.filter(checkpoint=checkpoint)
        copies = list(
            CheckpointCopy.objects.filter(checkpoint=checkpoint, gone_at__isnull=True)
            .select_related("location")
            .order_by("location__name")
        )
    else:
        pins = pins.filter(checkpoint__run=run)
        deletions = deletions.filter(checkpoint__run=run)
    holds = list(holds.order_by("-placed_at", "-pk")[:LISTED])
    now = timezone.now()
    for h in holds:
        h.is_retained = h.retained(now)
        h.can_release = may_release(user, h, now=now)
        if h.is_retained:
            h.extend_min = max(now.date(), h.retain_until.date()) + timedelta(days=1)
    modes = [label.lower() for mode, label in HoldMode.choices if any(h.mode == mode for h in holds)]
    today = now.date()
    pins = list(pins.order_by("-pinned_at", "-pk")[:LISTED])
    deletions = list(deletions.order_by("execute_after", "pk")[:LISTED])
    live_leases = Lease.objects.filter(released_at__isnull=True, expires_at__gt=now)
    live_leases = (
        live_leases.filter(checkpoint=checkpoint) if checkpoint is not None else live_leases.filter(checkpoint__run=run)
    )
    # What already forbids deleting the checkpoint, known before any preview: the same rules the preview and the
    # execution apply (actions.promises), said on the page so nobody opens a preview only to be refused.
    deletion_refusal = None
    if checkpoint is not None:
        deletion_refusal = promises.held(checkpoint) or promises.pinned(checkpoint) or promises.leased(checkpoint)
    return {
        "deletion_refusal": deletion_refusal,
        "request": request,
        "user": user,
        "csrf_token": context.get("csrf_token"),
        "run": run,
        "checkpoint": checkpoint,
        "holds": holds,
        "holds_title": f"Under {modes[0]}" if len(modes) == 1 else f"Under holds ({', '.join(modes)})",
        "hold_modes": [(mode, label, HOLD_MODE_HELP[mode]) for mode, label in HoldMode.choices],
        "retain_min": today + timedelta(days=1),
        "retain_max": today + timedelta(days=settings.HOLD_COMPLIANCE_MAX_DAYS),
        "run_holds": [h for h in holds if h.checkpoint_id is None],
        "pins": pins,
        "deletions": deletions,
        "copies": copies,
        "leases": list(live_leases.select_related("checkpoint").order_by("expires_at")[:LISTED]),
        "lease_purposes": LeasePurpose.choices,
        "listed": LISTED,
        "can_operate": has_role(user, Role.OPERATOR),
        "can_approve": has_role(user, Role.APPROVER),
        "here": request.get_full_path() if request is not None else "",
    }
