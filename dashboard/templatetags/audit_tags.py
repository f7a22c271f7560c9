"""The audit history of one run or checkpoint, included on its page with ``{% audit_history run %}``."""

from __future__ import annotations

from django import template
from django.db.models import Q
from django.urls import NoReverseMatch, reverse

from audit.models import AuditEvent
from catalog.models import Checkpoint, Run
from dashboard.audit_filters import about_run

register = template.Library()

HISTORY_SHOWN = 10


@register.inclusion_tag("audit/_history.html")
def audit_history(target, limit: int = HISTORY_SHOWN):
    """The newest events about ``target`` (a run: the run and its checkpoints), with a link to all of them."""
    if isinstance(target, Run):
        where, params, noun = about_run(target.pk), f"run={target.pk}", "run"
    elif isinstance(target, Checkpoint):
        where = Q(target_type="checkpoint", target_id=target.pk)
        params, noun = f"target_type=checkpoint&target_id={target.pk}", "checkpoint"
    else:
        return {"events": [], "noun": "item", "more_url": ""}
    events = AuditEvent.objects.filter(where)
    rows = list(events.order_by("-pk")[: limit + 1])
    return {
        "events": rows[:limit],
        "more": len(rows) > limit,
        "noun": noun,
        "more_url": f"{reverse('audit:trail')}?{params}",
    }


@register.filter
def audit_target_href(event: AuditEvent) -> str:
    """Where the target of an event is shown, when it has a page; "" otherwise."""
    if event.target_id is None:
        return ""
    names = {
        "run": ("catalog:run-detail", [event.target_id]),
        "checkpoint": ("catalog:checkpoint-detail", [event.target_id]),
        "inventory": ("fleet:inventory-detail", [event.target_id]),
        "team": ("spend:team", [event.target_id]),
    }
    try:
        if event.target_type in names:
            name, args = names[event.target_type]
            return reverse(name, args=args)
        if event.target_type == "host":
            return reverse("fleet:host-detail", args=[event.target_id])
        if event.target_type == "location":
            return reverse("fleet:location-detail", args=[event.target_id])
    except NoReverseMatch:
        return ""
    return ""


@register.filter
def audit_json(value) -> str:
    """before/after as short readable text: key: value pairs."""
    if value in (None, {}, []):
        return ""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items() if v not in (None, "", [], {}))
    return str(value)
