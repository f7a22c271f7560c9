"""The audit history of one run or checkpoint, included on its page with ``{% audit_history run %}``."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.db.models import Q
from django.urls import NoReverseMatch, reverse

from audit.models import AuditEvent
from catalog.models import Checkpoint, Run
from catalog.templatetags.fleet_format import utc
from ckptfleet.units import bytes_iec
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


CHANGES_SHOWN = 8  # lines of one event's before -> after on the trail; the CSV export has all of it


def _when(text: str) -> str | None:
    """An ISO date-time (as the audit stores them) as "2026-11-01 12:00 UTC"; None when ``text`` is not one."""
    if len(text) < 16 or text[4] != "-" or "T" not in text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return utc(value)


def audit_value(value, key: str = "") -> str:
    """One stored value in words: yes/no, "none", sizes in binary units, times in UTC, lists joined."""
    if value is None or value == "" or value == [] or value == {}:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        if key == "bytes" or key.endswith("_bytes") or key.startswith("bytes_"):
            return bytes_iec(value)
        return f"{value:,}" if not (key == "id" or key.endswith("_id") or key in _IDS) else str(value)
    if isinstance(value, float):
        return f"{value:,g}"
    if isinstance(value, str):
        return _when(value) or value
    if isinstance(value, list):
        return ", ".join(audit_value(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{_label(k)} {audit_value(v, k)}" for k, v in value.items())
    return str(value)


# Keys that hold the number of a row (a deletion, a hold, a promotion): shown bare, without a thousands separator.
_IDS = frozenset({"deletion", "hold", "pin", "promotion", "move", "inventory", "lease", "checkpoint", "copy", "run"})


def _label(key: str) -> str:
    return key.replace("_", " ") + ":"


def audit_changes(before, after) -> list[str]:
    """An event's before and after as lines a person reads: "held: no → yes" for what changed, "mode: legal" for
    what the event set, "location was s3:a" for what only the before names; what stayed the same is left out."""
    before = before if isinstance(before, dict) else ({} if before in (None, "") else {"value": before})
    after = after if isinstance(after, dict) else ({} if after in (None, "") else {"value": after})
    lines = []
    for key in [*before.keys(), *(k for k in after.keys() if k not in before)]:
        old, new = before.get(key), after.get(key)
        if key in before and key in after:
            if old == new:
                continue
            lines.append(f"{_label(key)} {audit_value(old, key)} → {audit_value(new, key)}")
        elif key in after:
            if new in (None, "", [], {}):
                continue
            lines.append(f"{_label(key)} {audit_value(new, key)}")
        elif old not in (None, "", [], {}):
            lines.append(f"{key.replace('_', ' ')} was {audit_value(old, key)}")
    return lines


@register.simple_tag
def audit_change_lines(event: AuditEvent, limit: int = CHANGES_SHOWN) -> dict:
    """``{% audit_change_lines event as change %}``: ``change.lines`` (at most ``limit``) and ``change.more``."""
    lines = audit_changes(event.before, event.after)
    return {"lines": lines[:limit], "more": max(0, len(lines) - limit)}
