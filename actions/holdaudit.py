"""The holds' state against their audit events: what ``verify_audit`` adds about holds.

The chain and its anchors prove that no event was changed or removed; they say nothing of a hold changed without
an event at all. Whoever owns the tables may still do that by raw SQL (docs/admin/database-roles.md): release a
hold, shorten a compliance date by disabling its trigger, create a hold the trail never saw. Every hold's state must
follow from its events (``hold.place``, ``hold.extend``, ``hold.release``, all written by ``actions.services`` in the
same transaction as the change), so any difference is named here, one sentence per hold.
"""

from __future__ import annotations

from collections import defaultdict

from actions.models import Hold

HOLD_ACTIONS = ("hold.place", "hold.extend", "hold.release")


def _hold_id(after) -> int | None:
    if isinstance(after, dict) and isinstance(after.get("hold"), int) and not isinstance(after.get("hold"), bool):
        return after["hold"]
    return None


def hold_problems() -> list[str]:
    """Each hold whose row disagrees with its audit events, and each event naming a hold that is gone."""
    from audit.models import AuditEvent

    events: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    rows = AuditEvent.objects.filter(action__in=HOLD_ACTIONS).order_by("id")
    for action, after, target_type, target_id in rows.values_list("action", "after", "target_type", "target_id"):
        hold_id = _hold_id(after)
        if hold_id is not None:
            events[hold_id][action].append((after, target_type, target_id))
    problems = []
    seen = set()
    for hold in Hold.objects.order_by("id").iterator(chunk_size=2000):
        seen.add(hold.pk)
        problems.extend(_one(hold, events.get(hold.pk, {})))
    for hold_id in sorted(set(events) - seen):
        problems.append(f"hold {hold_id} has audit events but is no longer in the database: it was deleted by SQL")
    return problems


def _one(hold: Hold, events) -> list[str]:
    name = f"hold {hold.pk} ({hold.case_ref}, {hold.get_mode_display().lower()})"
    places = events.get("hold.place", [])
    if not places:
        return [f"{name} has no hold.place event: it was created (or re-numbered) without one, by SQL"]
    problems = []
    after, target_type, target_id = places[0]
    scope = ("checkpoint", hold.checkpoint_id) if hold.checkpoint_id else ("run", hold.run_id)
    if (target_type, target_id) != scope:
        problems.append(
            f"{name} covers {scope[0]} {scope[1]} but was placed on {target_type} {target_id}: changed without an event"
        )
    if after.get("mode") not in (None, hold.mode):
        problems.append(f"{name} was placed as {after.get('mode')}: its mode was changed without an event")
    if hold.retain_until is not None or after.get("retain_until"):
        dates = [after.get("retain_until")] + [a.get("retain_until") for a, _, _ in events.get("hold.extend", [])]
        expected = dates[-1]
        actual = hold.retain_until.isoformat() if hold.retain_until else None
        if actual != expected:
            problems.append(
                f"{name} is retained until {actual or 'no date'}, its events say {expected or 'no date'}: the date was "
                "changed without an event"
            )
    released = events.get("hold.release", [])
    if hold.released_at is not None and not released:
        problems.append(
            f"{name} was released at {hold.released_at:%Y-%m-%d %H:%M} UTC by {hold.released_label or 'nobody named'} "
            "with no hold.release event: released behind the product's back (raw SQL as the database owner)"
        )
    if hold.released_at is None and released:
        problems.append(f"{name} is active but has a hold.release event: it was re-activated without an event")
    return problems
