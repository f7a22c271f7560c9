"""Pages of the audit trail: the whole trail with filters, its CSV export, and the chain's verification.

The trail grows forever, so the page never offsets: it walks the primary key (keyset pagination,
``?before=<id>`` / ``?after=<id>``), and the export streams rows as it reads them. Its total is the chain
head's count, except for a person scoped to some teams: theirs is counted over what they may see.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import UTC, timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import StreamingHttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from access.roles import Role, has_role, require_role
from access.scoping import restrict_events, scoped_team_names
from access.services import AUDIT_VERIFY_ACTION
from access.tasks import verify_audit_chain
from audit import verify as audit_verify
from audit.anchors import configured_stores
from audit.choices import AnchorOutcome
from audit.models import AuditChainHead, AuditEvent
from ckptfleet.errors import PermissionRefused
from ckptfleet.params import positive_int_param
from dashboard.audit_filters import AuditEventFilter

EVENTS_PER_PAGE = 50
VERIFY_ACTION = AUDIT_VERIFY_ACTION
CSV_COLUMNS = [
    "id",
    "at_utc",
    "actor_kind",
    "actor",
    "source",
    "action",
    "target_type",
    "target_id",
    "target_label",
    "reason",
    "case_ref",
    "before",
    "after",
    "request_id",
    "hash",
]


def _filtered(request) -> tuple[AuditEventFilter, object]:
    visible = restrict_events(AuditEvent.objects.all(), request.user)  # a scoped person: their teams' runs only
    filterset = AuditEventFilter(request.GET or None, queryset=visible)
    events = filterset.qs if filterset.is_bound and filterset.is_valid() else visible
    if filterset.is_bound and not filterset.is_valid():
        events = AuditEvent.objects.none()
    return filterset, events


def keyset_page(events, *, before: int | None, after: int | None, size: int = EVENTS_PER_PAGE):
    """One page of ``events``, newest first, starting below ``before`` or above ``after``.

    Returns (rows, older_cursor or None, newer_cursor or None); each cursor is an event id.
    """
    if after is not None:
        rows = list(events.filter(pk__gt=after).order_by("pk")[: size + 1])
        more_newer = len(rows) > size
        rows = rows[:size][::-1]
        more_older = bool(rows) and events.filter(pk__lt=rows[-1].pk).exists()
    else:
        newest_first = events.order_by("-pk")
        if before is not None:
            newest_first = newest_first.filter(pk__lt=before)
        rows = list(newest_first[: size + 1])
        more_older = len(rows) > size
        rows = rows[:size]
        more_newer = before is not None and bool(rows) and events.filter(pk__gt=rows[0].pk).exists()
    older = rows[-1].pk if rows and more_older else None
    newer = rows[0].pk if rows and more_newer else None
    return rows, older, newer


def _total(user) -> int:
    """Events in the trail as ``user`` sees it: the chain head's count, or, for a person scoped to some teams,
    a count of the events they may see (the head counts every team's)."""
    if scoped_team_names(user) is None:
        head = AuditChainHead.objects.filter(pk=1).first()
        return head.count if head else 0
    return restrict_events(AuditEvent.objects.all(), user).count()


def last_verification() -> AuditEvent | None:
    """The newest verification a person asked for on this page (an event: who asked is part of the trail)."""
    return AuditEvent.objects.filter(action=VERIFY_ACTION).order_by("-pk").first()


def _stale(when, minutes: int) -> bool:
    """Older than two scheduled intervals: beat or the worker is not running, or the runs fail."""
    return when is None or timezone.now() - when > timedelta(minutes=2 * minutes)


def integrity_context() -> dict:
    """The last verification and anchors, for the callout on top of the trail."""
    verification = audit_verify.last_verification()
    anchor = audit_verify.last_anchor()
    written = (
        anchor if anchor is not None and anchor.outcome == AnchorOutcome.WRITTEN else audit_verify.last_written_anchor()
    )
    return {
        "check": verification,
        "check_stale": _stale(verification.finished_at if verification else None, settings.AUDIT_VERIFY_MINUTES),
        "anchor": anchor,
        "anchor_written": written,
        "anchor_stale": _stale(written.at if written else None, settings.AUDIT_ANCHOR_MINUTES),
        "anchor_stores": [store.describe() for store in configured_stores()],
        "verify_minutes": settings.AUDIT_VERIFY_MINUTES,
        "anchor_minutes": settings.AUDIT_ANCHOR_MINUTES,
    }


@login_required
def audit_trail(request):
    filterset, events = _filtered(request)
    rows, older, newer = keyset_page(
        events, before=positive_int_param(request, "before"), after=positive_int_param(request, "after")
    )
    query = request.GET.copy()
    for cursor in ("before", "after"):
        query.pop(cursor, None)
    return render(
        request,
        "audit/trail.html",
        {
            "filter": filterset,
            "events": rows,
            "older": older,
            "newer": newer,
            "query": query.urlencode(),
            "filtered": any(v for k, v in query.items()),
            "total": _total(request.user),
            # The chain is the whole fleet's: a person scoped to some teams is told it held, not its length.
            "scoped": scoped_team_names(request.user) is not None,
            "can_verify": has_role(request.user, Role.ADMIN),
            **integrity_context(),
        },
    )


def _cell(value) -> str:
    """A CSV cell that a spreadsheet shows as text, never runs as a formula."""
    text = "" if value is None else str(value)
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class _Echo:
    def write(self, value: str) -> str:
        return value


def csv_rows(events) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for e in events.order_by("pk").iterator(chunk_size=2000):
        yield writer.writerow(
            [
                e.pk,
                e.at.astimezone(UTC).isoformat(),
                e.actor_kind,
                _cell(e.actor_label),
                e.source,
                _cell(e.action),
                _cell(e.target_type),
                "" if e.target_id is None else e.target_id,
                _cell(e.target_label),
                _cell(e.reason),
                _cell(e.case_ref),
                "" if e.before is None else _cell(json.dumps(e.before, sort_keys=True)),
                "" if e.after is None else _cell(json.dumps(e.after, sort_keys=True)),
                _cell(e.request_id),
                e.hash,
            ]
        )


@login_required
def audit_export(request):
    """The filtered trail as CSV, oldest first, streamed: any size without holding it in memory."""
    _, events = _filtered(request)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response = StreamingHttpResponse(csv_rows(events), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="audit-trail-{stamp}.csv"'
    return response


@login_required
@require_POST
def audit_verify_now(request):
    """Verify the chain (admins), as a task that records the result as an event: the page shows when it last ran."""
    user = request.user
    try:
        require_role(user, Role.ADMIN, doing="Verifying the audit chain", target_type="audit_chain")
    except PermissionRefused as exc:
        messages.error(request, exc.message)
        return redirect("audit:trail")

    asked = last_verification()
    request_id = getattr(request, "request_id", "")
    # Nothing of this request needs committing first. Without a worker (the embedded default) it has run
    # when delay() returns; with one, the page says so and the result shows on reload.
    verify_audit_chain.delay(user.pk, request_id)
    done = last_verification()
    if done is None or (asked is not None and done.pk == asked.pk):
        messages.info(request, "Verification of the audit chain started; reload this page for its result.")
    elif done.after.get("intact"):
        anchors = done.after.get("anchors_checked", 0)
        messages.success(
            request,
            f"The audit chain is intact: {done.after['checked']:,} events checked. "
            + (f"It agrees with its {anchors:,} anchors." if anchors else "No anchor to compare it with."),
        )
    else:
        messages.error(request, f"Audit trail verification failed: {done.after['why']}.")
    return redirect("audit:trail")
