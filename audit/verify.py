"""Verifying the audit trail: the chain end to end, and the chain against every anchor written outside the database.

The chain alone shows an event edited without the key. The anchors show what the chain alone cannot: events
removed from the end, or a stretch rewritten and re-hashed by someone who had the key (or who relabelled keyed
events as unkeyed): an anchor written before the rewrite names a hash the database no longer has at that position.
Each problem is one sentence a person can act on, naming the anchor, the event and both hashes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from django.utils import timezone

from audit.anchors import Anchor, AnchorStore, BadAnchor, configured_stores, read_anchor
from audit.choices import AnchorOutcome
from audit.models import AuditAnchor, AuditChainHead, AuditEvent, AuditVerification
from audit.services import audit_verify


@dataclass
class VerifyReport:
    events_checked: int = 0
    anchors_checked: int = 0
    broken_event: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


# State the apps above keep in their own tables that the audit trail must account for (a hold released by SQL, with
# no event): each check returns its problems as sentences. Registered from an app's ready(), since this floor imports
# none of them (actions registers the holds' check).
StateCheck = Callable[[], list[str]]
_state_checks: list[StateCheck] = []


def register_state_check(check: StateCheck) -> None:
    if check not in _state_checks:
        _state_checks.append(check)


def short(value: str) -> str:
    return f"{value[:12]}…"


def _read_anchors(stores: list[AnchorStore], report: VerifyReport) -> dict[int, list[Anchor]]:
    """Every anchor the stores hold, by the event count it names; unreadable and forged ones become problems."""
    by_count: dict[int, list[Anchor]] = defaultdict(list)
    for store in stores:
        seen: set[tuple[int, str]] = set()
        try:
            for location, raw in store.read_all():
                try:
                    anchor = read_anchor(raw, location)
                except BadAnchor as exc:
                    report.problems.append(str(exc))
                    continue
                by_count[anchor.count].append(anchor)
                seen.add((anchor.count, anchor.last_hash))
        except Exception as exc:  # a store we cannot read is a failed verification, said plainly
            report.problems.append(f"the anchors in {store.describe()} cannot be read: {type(exc).__name__}: {exc}")
            continue
        # Anchors the database remembers writing to this store that the store no longer holds (a file cut short or
        # edited, an object gone): someone removed the evidence.
        written = AuditAnchor.objects.filter(target=store.target, outcome=AnchorOutcome.WRITTEN).order_by("at", "id")
        for record in written.iterator(chunk_size=2000):
            if store.holds(record.location) and (record.count, record.last_hash) not in seen:
                report.problems.append(
                    f"the anchor written {timezone.localtime(record.at):%Y-%m-%d %H:%M %Z} for event {record.count:,} "
                    f"(hash {short(record.last_hash)}) is no longer in {record.location}"
                )
    return by_count


def audit_verify_all(*, stores: list[AnchorStore] | None = None) -> VerifyReport:
    """Walk the chain and compare it with every anchor in every configured store (or in ``stores``)."""
    report = VerifyReport()
    anchors = _read_anchors(configured_stores() if stores is None else stores, report)

    def compare(position: int, event: AuditEvent) -> None:
        for anchor in anchors.get(position, ()):
            report.anchors_checked += 1
            if anchor.last_hash != event.hash:
                report.problems.append(
                    f"{anchor.describe()} says event {position:,} has hash {short(anchor.last_hash)}, the database has "
                    f"{short(event.hash)} (event id {event.pk}): events up to it were rewritten"
                )

    checked, broken, why = audit_verify(compare)
    report.events_checked = checked
    if why:
        report.broken_event = broken.pk if broken else None
        where = f"event {broken.pk} (position {checked + 1:,})" if broken else "the end of the chain"
        intact = "the one event before it is intact" if checked == 1 else f"the {checked:,} events before it are intact"
        report.problems.insert(0, f"the chain is broken at {where}: {why}; {intact}")
    else:
        for count in sorted(c for c in anchors if c > checked):
            for anchor in anchors[count]:
                report.anchors_checked += 1
                report.problems.append(
                    f"{anchor.describe()} says event {count:,} has hash {short(anchor.last_hash)}, the database has "
                    f"only {checked:,} events: events were removed"
                )
    for check in _state_checks:
        report.problems.extend(check())
    return report


def record_report(*, trigger: str, stores: list[AnchorStore] | None = None) -> tuple[VerifyReport, AuditVerification]:
    """Verify everything and keep the result for the audit page, the health answer and the metrics."""
    started = timezone.now()
    report = audit_verify_all(stores=stores)
    recorded = AuditVerification.objects.create(
        started_at=started,
        finished_at=timezone.now(),
        trigger=trigger,
        ok=report.ok,
        events_checked=report.events_checked,
        anchors_checked=report.anchors_checked,
        problem=report.problems[0] if report.problems else "",
        problems=len(report.problems),
    )
    return report, recorded


def verify_and_record(*, trigger: str, stores: list[AnchorStore] | None = None) -> AuditVerification:
    return record_report(trigger=trigger, stores=stores)[1]


def last_verification() -> AuditVerification | None:
    return AuditVerification.objects.order_by("-finished_at", "-id").first()


def last_anchor() -> AuditAnchor | None:
    return AuditAnchor.objects.order_by("-at", "-id").first()


def last_written_anchor() -> AuditAnchor | None:
    return AuditAnchor.objects.filter(outcome=AnchorOutcome.WRITTEN).order_by("-at", "-id").first()


def _iso(when) -> str | None:
    return when.isoformat() if when else None


def health_facts() -> dict:
    """The audit part of /healthz/: the last verification and the last anchor written (two indexed reads).

    /healthz/ needs no login, so it says whether and when, not what: the problem's words (event ids, hashes, paths)
    are on the audit page and in ``manage.py verify_audit``."""
    check = last_verification()
    anchor = last_written_anchor()
    return {
        "verified_ok": check.ok if check else None,
        "verified_at": _iso(check.finished_at if check else None),
        "events_checked": check.events_checked if check else None,
        "anchors_checked": check.anchors_checked if check else None,
        "last_anchor_at": _iso(anchor.at if anchor else None),
    }


def metric_gauges() -> list[tuple[str, str, float | None]]:
    """The audit gauges of /metrics; a gauge with nothing measured yet is left out."""
    check = last_verification()
    anchor = last_written_anchor()
    head = AuditChainHead.objects.filter(pk=1).first()
    return [
        ("ckptfleet_audit_verify_ok", "1 if the last audit verification passed, 0 if it failed", _flag(check)),
        (
            "ckptfleet_audit_last_verify_timestamp_seconds",
            "Unix time the last audit verification finished",
            check.finished_at.timestamp() if check else None,
        ),
        ("ckptfleet_audit_events", "Events in the audit chain (its head's count)", head.count if head else 0),
        (
            "ckptfleet_audit_last_anchor_timestamp_seconds",
            "Unix time the last anchor of the audit chain was written outside the database",
            anchor.at.timestamp() if anchor else None,
        ),
    ]


def _flag(check: AuditVerification | None) -> float | None:
    if check is None:
        return None
    return 1.0 if check.ok else 0.0
