"""The overview people land on, and the copy triage queues its counts link to.

The overview reads rollups (UsageDaily through ``spend.report``), the placement flags, a few
counts over copies and locations, and the newest audit events: a fixed number of queries whatever
the size of the fleet.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.db.models import Count, OuterRef, Q, Subquery, Sum
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from access.roles import Role, has_role
from access.scoping import restrict_events, restrict_runs, scoped_team_names, spend_team_ids
from audit.models import AuditEvent
from catalog.choices import CopyState, Verification
from catalog.models import CheckpointCopy, Run
from catalog.recovery_model import runs_losing_newest
from ckptfleet.params import positive_int_param
from dashboard import jobs, problems
from fleet.choices import InventoryStatus
from fleet.models import Inventory, StorageLocation
from fleet.pricebook import utc_today
from spend import placement
from spend import report as spend
from spend.models import UsageDaily, UsageState
from spend.views import bytes_by_tier_chart

RECENT_EVENTS = 8
JOBS_ATTENTION_DAYS = 7
QUEUE_PAGE = 100

DISPUTED = "disputed"
STALE = "stale"

# The copy queues: what each one lists, and why it needs attention. A copy is in one queue only: the kinds of the
# problems list (``dashboard.problems``), so that a copy whose checksum mismatch made it corrupt is not listed
# twice, under "corrupt" and under "checksums disagree". A disputed copy is in no queue of copies to delete as
# bad (PRODUCT.md, promise 10): it has its own. The stale queue's filter depends on the time and the setting, so
# it is made per request (``queue_filter``).
QUEUES = {
    "partial": ("Partial copies", problems.KIND_HELP[problems.Kind.PARTIAL], problems.copy_kind_filter("partial")),
    "corrupt": ("Corrupt copies", problems.KIND_HELP[problems.Kind.CORRUPT], problems.copy_kind_filter("corrupt")),
    DISPUTED: (
        "Disputed copies",
        "Their checksums differ from another copy's and nothing independent says which is right: neither is "
        "offered for restore nor for deletion as bad until it is settled. Each row says what would settle it.",
        problems.copy_kind_filter("disputed"),
    ),
    "unverified": (
        "Complete but unverified copies",
        "Complete by their manifest, but no checksum evidence confirms the content.",
        Q(state=CopyState.COMPLETE, verification=Verification.UNVERIFIED, temporary=False),
    ),
    STALE: (
        "Verified copies not verified recently",
        "Verified, but the checksums behind the verdict are older than CKPTFLEET_VERIFY_STALE_DAYS: they may no "
        "longer describe what is stored. Check them again (the agent's --checksums, a bucket scan).",
        None,
    ),
}
# Old links to the queue of copies whose checksums disagree: those copies are corrupt copies now.
QUEUE_ALIASES = {"mismatch": "corrupt"}
# Where each queue and placement flag of the overview is in the problems list.
PROBLEM_KIND_OF = {
    "partial": problems.Kind.PARTIAL,
    "corrupt": problems.Kind.CORRUPT,
    DISPUTED: problems.Kind.DISPUTED,
    "unverified": problems.Kind.UNVERIFIED,
    STALE: problems.Kind.UNVERIFIED,
    placement.Flag.UNDER_REPLICATED: problems.Kind.UNDER_REPLICATED,
    placement.Flag.NEWEST_ON_ONE_HOST: problems.Kind.UNDER_REPLICATED,
    placement.Flag.FINISHED_ON_NVME: problems.Kind.MISPLACED,
    placement.Flag.ARCHIVE_ONLY: problems.Kind.MISPLACED,
}


def problems_url(key: str) -> str:
    return f"{reverse('problems:list')}?kind={PROBLEM_KIND_OF[key]}"


def queue_filter(kind: str) -> Q:
    """The copies of a queue, as a filter on present copies."""
    if kind == STALE:
        return placement.stale_verified_copies()
    return QUEUES[kind][2]


def queue_label(kind: str) -> str:
    if kind == STALE:
        return f"Verified copies not verified for {placement.stale_days():,} days"
    return QUEUES[kind][0]


# What the queue's bulk bar offers (``actions.views_bulk``): a row is one copy of a checkpoint.
BULK_OPTIONS = [
    ("pin", "Pin their checkpoints"),
    ("hold", "Place a legal hold on their checkpoints"),
    ("delete-copy", "Schedule deletion of the listed copies"),
    ("delete-checkpoint", "Schedule deletion of their whole checkpoints"),
]
# A disputed copy is not deleted alone (promise 10): its queue offers only what keeps or takes the whole.
DISPUTED_BULK_OPTIONS = [option for option in BULK_OPTIONS if option[0] != "delete-copy"]


def _present_copies(user):
    return restrict_runs(CheckpointCopy.objects.filter(gone_at__isnull=True), user, run_path="checkpoint__run__")


def _locations_with_last_scan():
    newest = Inventory.objects.filter(location=OuterRef("pk")).order_by("-received_at", "-id")
    return StorageLocation.objects.select_related("host").annotate(
        last_status=Subquery(newest.values("status")[:1]),
        last_error=Subquery(newest.values("error")[:1]),
        last_received=Subquery(newest.values("received_at")[:1]),
    )


def overview_basis(user=None) -> tuple[spend.Basis, spend.Summary]:
    """This month's spend basis and headline numbers (of ``user``'s teams when scoped: ``access.scoping``)."""
    today = utc_today()
    scope = spend.Scope(team_ids=spend_team_ids(user))
    basis = spend.basis_for(spend.Period.month(today.year, today.month), today=today, scope=scope)
    return basis, spend.summary(basis)


def attention_items(user, basis: spend.Basis, *, locations=None) -> list[dict]:
    """Every queue that may need attention: its count (and bytes), what it means and where it is listed."""
    copies = _present_copies(user).aggregate(**{key: Count("pk", filter=queue_filter(key)) for key in QUEUES})
    orphaned = {}
    if basis.as_of is not None:
        orphaned = (
            UsageDaily.objects.filter(
                day=basis.as_of, state__in=[UsageState.UNCLAIMED, UsageState.TEMPORARY, UsageState.MULTIPART]
            )
            .filter(basis.scope.q())
            .aggregate(bytes=Sum("bytes"), files=Sum("files"))
        )
    if locations is None:
        locations = list(_locations_with_last_scan())
    failing = sum(1 for loc in locations if loc.last_status == InventoryStatus.FAILED)
    return [
        *(
            {
                "key": key,
                "label": queue_label(key),
                "count": copies[key],
                "help": help_text,
                "url": problems_url(key),
                "noun": "copy,copies",
            }
            for key, (_, help_text, _) in QUEUES.items()
        ),
        {
            "key": "orphaned",
            "label": "Orphaned bytes",
            "bytes": orphaned.get("bytes") or 0,
            "count": orphaned.get("files") or 0,
            "noun": "file",
            "help": "Files of no checkpoint, left-overs of interrupted saves, incomplete multipart uploads.",
            "url": f"{reverse('problems:list')}?kind={problems.Kind.ORPHANED}",
        },
        *(
            {
                "key": flag,
                "label": placement.flag_label(flag),
                "count": n,
                "noun": "checkpoint",
                "help": placement.flag_help(flag),
                "url": problems_url(flag),
            }
            for flag, n in _flag_counts(user).items()
            # The stale queue above lists these copies already, with its bulk actions.
            if flag != placement.Flag.VERIFICATION_STALE
        ),
        {
            "key": "jobs_ended_badly",
            "label": f"Deletions and promotions that failed or were blocked (last {JOBS_ATTENTION_DAYS} days)",
            "count": jobs.ended_badly(since=timezone.now() - timedelta(days=JOBS_ATTENTION_DAYS), user=user),
            "noun": "job",
            "help": "A blocked deletion left objects the store refused to delete (an Object Lock hold or "
            "retention); a failed promotion left no new copy. Each job's page says why.",
            "url": f"{reverse('jobs:list')}?state=failed",
        },
        {
            "key": "failed_scans",
            "label": "Locations whose last scan failed",
            "count": failing,
            "noun": "location",
            "help": "Their newest inventory or bucket scan failed: nothing was marked gone, but what is there "
            "now is unknown.",
            "url": reverse("fleet:overview"),
        },
    ]


def _flag_counts(user) -> dict[str, int]:
    if scoped_team_names(user) is None:
        return placement.flag_counts()
    return {f: restrict_runs(placement.flagged(f), user, run_path="run__").count() for f in placement.Flag.values}


@login_required
def overview(request):
    basis, summary = overview_basis(request.user)
    by_tier = spend.by_tier(basis)
    locations = list(_locations_with_last_scan().order_by("last_applied_at", "name"))
    attention = attention_items(request.user, basis, locations=locations)
    copies_total = _present_copies(request.user).count()
    events = list(restrict_events(AuditEvent.objects.all(), request.user).order_by("-at", "-id")[:RECENT_EVENTS])
    return render(
        request,
        "overview.html",
        {
            "basis": basis,
            "summary": summary,
            "by_tier": by_tier,
            "bytes_chart": bytes_by_tier_chart(by_tier),
            "attention": attention,
            "needs_attention": sum(1 for a in attention if a["count"]),
            "copies_total": copies_total,
            "locations": locations,
            "events": events,
            # Host down as a fleet event: runs whose newest restorable checkpoint is only on a down or silent host.
            "losses": runs_losing_newest(restrict_runs(Run.objects.all(), request.user)),
        },
    )


@login_required
def copy_queue(request):
    kind = request.GET.get("kind", "partial")
    kind = QUEUE_ALIASES.get(kind, kind)
    if kind not in QUEUES:
        kind = "partial"
    _, help_text, _ = QUEUES[kind]
    label, q = queue_label(kind), queue_filter(kind)
    after = positive_int_param(request, "after")
    rows = (
        _present_copies(request.user)
        .filter(q)
        .select_related("checkpoint", "checkpoint__run", "checkpoint__run__team", "location")
        .order_by("-pk")
    )
    if after:
        rows = rows.filter(pk__lt=after)
    page = list(rows[: QUEUE_PAGE + 1])
    more = len(page) > QUEUE_PAGE
    page = page[:QUEUE_PAGE]
    totals = _present_copies(request.user).filter(q).aggregate(n=Count("pk"), bytes=Sum("bytes"))
    return render(
        request,
        "catalog/copy_queue.html",
        {
            "kind": kind,
            "label": label,
            "help": help_text,
            "queues": [(key, queue_label(key)) for key in QUEUES],
            "copies": page,
            "next_after": page[-1].pk if more and page else None,
            "total": totals["n"],
            "total_bytes": totals["bytes"] or 0,
            "can_act": has_role(request.user, Role.OPERATOR),
            "bulk_options": DISPUTED_BULK_OPTIONS if kind == DISPUTED else BULK_OPTIONS,
        },
    )
