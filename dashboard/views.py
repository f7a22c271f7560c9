"""Pages of the catalog: runs, a run's checkpoints, one checkpoint's copies and their files, orphans.

Views only read request parameters and call selectors; what a page shows is decided there, so the
API and the pages cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from access.middleware import request_id_of
from access.roles import Role, has_role
from access.scoping import may_see_run, restrict_runs, restrict_teams, scoped_team_names, visible_orphans
from actions import orphans as orphan_cleanup
from actions.models import DeletionJob, Hold, HoldMode, Pin
from actions.protection import OPEN_DELETION_STATES
from actions.views import may_clean_up_orphans
from audit.actor import Actor
from catalog import lifecycle, recovery, selectors
from catalog.choices import CopyState, RunStatus, RunStatusSource, Verification
from catalog.models import Checkpoint, CheckpointCopy, RestoreDrill, Run, Team
from catalog.pointers import pointers_for_run
from catalog.recovery_model import recovery_point_of
from catalog.reshard import layouts_of
from catalog.verification import VerificationSummary, failure_domain, summarize
from ckptfleet.errors import DomainError
from ckptfleet.params import positive_int_param, whole_number
from dashboard import selectors_fleet
from dashboard.run_filters import SORTS, BadCursor, Place, RunFilters
from fleet.choices import Tier
from fleet.models import StorageLocation
from spend import placement

RUNS_PER_PAGE = 50
CHECKPOINTS_PER_PAGE = 50
FILES_SHOWN = 50  # per copy on the checkpoint page; every file is on the copy's own paged list
FILES_PER_PAGE = 200
ORPHAN_GROUPS_PER_PAGE = 100
FLAGGED_PER_PAGE = 50
FLAGGED_PREVIEW = 5
# What a flag list's bulk bar offers (``actions.views_bulk``): a row is a whole checkpoint.
PLACEMENT_BULK_OPTIONS = [
    ("pin", "Pin them"),
    ("hold", "Place a legal hold on them"),
    ("delete-checkpoint", "Schedule deletion of every copy of them"),
]


@login_required
def run_list(request):
    """Keyset pages of runs (``RunFilters.page``): ``cursor`` from the Next and Previous links; an old
    ``page=N`` link still opens page N. A cursor that does not parse, or is of another sort, opens the start."""
    filters = RunFilters.from_params(request.GET)
    try:
        cursor = filters.cursor(request.GET.get("cursor"))
    except BadCursor:
        cursor = None
    number = (request.GET.get("page") or "").strip()
    page = whole_number(number, "page", minimum=1, maximum=10**9) if number else 1
    offset = (page - 1) * RUNS_PER_PAGE if cursor is None else 0
    runs = restrict_runs(Run.objects.all(), request.user)
    # A scoped person chooses among their own teams; another team's id is not found, and lists nothing.
    refusal = filters.team_refusal(restrict_teams(Team.objects.all(), request.user))
    if refusal is not None:
        runs = runs.none()
    page = filters.page(runs, cursor=cursor, offset=offset, size=RUNS_PER_PAGE)
    teams = list(restrict_teams(selectors.team_choices(), request.user))
    places = selectors_fleet.place_choices()
    return render(
        request,
        "catalog/run_list.html",
        {
            "team_refusal": refusal.message if refusal is not None else "",
            "page": page,
            "runs": page.runs,
            "next_query": filters.query(cursor=page.next.encode()) if page.next else "",
            "previous_query": filters.query(cursor=page.previous.encode()) if page.previous else "",
            "first_query": filters.query(),
            "teams": teams,
            "filters": filters,
            "q": filters.q,
            "team_id": filters.team_id,
            "filtered": filters.narrowed,
            "statuses": RunStatus.choices,
            "tiers": Tier.choices,
            "places": places,
            "place_chips": _place_chips(filters, places),
            "flags": placement.Flag.choices,
            "sorts": [(key, label) for key, (label, _) in SORTS.items()],
            "page_query": filters.query(),
            # No run at all and no filter: the fleet has reported nothing yet.
            "fleet_is_empty": page.count == 0 and not filters.narrowed,
        },
        status=refusal.http_status if refusal is not None else 200,
    )


def _place_chips(filters: RunFilters, places: selectors_fleet.PlaceChoices) -> list[tuple[str, str]]:
    """The place filters in force as (what it says, the list's query without it), for chips that remove them."""
    place = filters.place
    hosts, locations = dict(places.hosts), dict(places.locations)
    chips = []
    if place.host_id is not None:
        chips.append((f"host {hosts.get(place.host_id, f'#{place.host_id}')}", filters.query(host="")))
    if place.location_id is not None:
        chips.append(
            (f"location {locations.get(place.location_id, f'#{place.location_id}')}", filters.query(location=""))
        )
    if place.bucket:
        chips.append((f"bucket {place.bucket}", filters.query(bucket="")))
    if place.tier:
        chips.append((f"tier {Tier(place.tier).label}", filters.query(tier="")))
    if place.storage_class:
        chips.append((f"storage class {place.storage_class}", filters.query(storage_class="")))
    return chips


@login_required
def run_detail(request, pk: int):
    run = get_object_or_404(restrict_runs(selectors.run_list(), request.user), pk=pk)
    # ``?host=``, ``?location=``...: the run's checkpoints with a present copy there (from a host's or bucket's page).
    place = Place.from_params(request.GET)
    checkpoints_qs = selectors.run_checkpoints(run)
    if place:
        checkpoints_qs = checkpoints_qs.filter(pk__in=place.usage().values("copy__checkpoint_id"))
    paginator = Paginator(checkpoints_qs, CHECKPOINTS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    # The checkpoint recovery would restore the run from now: the run's recovery model, as the recovery page says.
    newest = recovery_point_of(run).checkpoint
    newest_copies = []
    if newest is not None:
        newest_copies = list(
            CheckpointCopy.objects.filter(recovery.restorable_copies(), checkpoint=newest)
            .select_related("location", "location__host")
            .order_by("-verification", "location__name")
        )
    checkpoints = list(page.object_list)
    run_placement = placement.run_placement(run.pk, checkpoints)
    pointers = pointers_for_run(run)
    return render(
        request,
        "catalog/run_detail.html",
        {
            "run": run,
            "place_chips": _place_chips(RunFilters(place=place), selectors_fleet.place_choices()) if place else [],
            "page_obj": page,
            "checkpoints": checkpoints,
            "newest": newest,
            "newest_copies": newest_copies,
            "placement": run_placement,
            "timeline": _timeline(run, run_placement, newest),
            "pointers": pointers,
            "can_set_status": has_role(request.user, Role.OPERATOR),
            "run_statuses": RunStatus.choices,
            "status_reason_max": lifecycle.MAX_STATUS_REASON,
            "idle_days": lifecycle.idle_days(),
        },
    )


@login_required
@require_POST
def run_status(request, pk: int):
    """The run page's status form: an operator says the run finished, failed, was abandoned, or is active."""
    run = get_object_or_404(restrict_runs(Run.objects.select_related("team"), request.user), pk=pk)
    try:
        change = lifecycle.run_status_set(
            run=run,
            status=request.POST.get("status", ""),
            reason=request.POST.get("reason", ""),
            actor=Actor.for_request(request),
            source=RunStatusSource.OPERATOR,
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Status not changed: {exc.message}")
    else:
        if change.changed:
            messages.success(request, f"{run} is now {change.run.get_status_display().lower()}.")
        else:
            messages.info(request, f"{run} is already {change.run.get_status_display().lower()}: nothing changed.")
    return redirect("catalog:run-detail", pk=pk)


@dataclass
class TimelineRow:
    """One checkpoint of the run page's timeline: the placement row (its copies under their locations)
    with what the timeline adds: where it sits on the step axis, its copies' states, the tiers its bytes
    are on, the protection it has, and the reasons of copies that are not good."""

    row: placement.Row
    cells: list[tuple[placement.Column, list[placement.PlacedCopy]]]
    position: float | None
    states: list[tuple[str, int]]
    tiers: list[str]
    verification: VerificationSummary
    pinned: bool
    holds: list[str]
    deletions: list[int]
    reasons: list[tuple[str, str]]
    newest: bool

    @property
    def checkpoint(self) -> Checkpoint:
        return self.row.checkpoint

    @property
    def mark_state(self) -> str:
        """The state the mark on the axis shows: the best copy's, since a checkpoint restores from its best."""
        names = [state for state, _ in self.states]
        for state in (CopyState.COMPLETE, CopyState.PARTIAL, CopyState.CORRUPT):
            if state in names:
                return state
        return "none"


def _copy_reasons(copy: CheckpointCopy) -> list[str]:
    """What is wrong with a copy, as the checkpoint page says it: its state's reasons, then verification's, each
    once (a reason can be recorded twice, and a checksum mismatch is among both lists)."""
    out = list(dict.fromkeys(copy.reasons or []))
    if copy.verification != Verification.VERIFIED:
        label = copy.get_verification_display()
        out += [f"{label}: {r}" for r in copy.verification_reasons or [] if r not in out]
    return out


def _hold_badge(case: str, mode: str, until) -> str:
    """A hold as the timeline names it: its case, and its mode unless legal (the compliance date too)."""
    if mode == HoldMode.COMPLIANCE and until is not None:
        return f"{case}, compliance until {until:%Y-%m-%d}"
    return case if mode == HoldMode.LEGAL else f"{case}, {mode}"


def _timeline(run: Run, run_placement: placement.RunPlacement, newest: Checkpoint | None) -> dict:
    """The run page's timeline of a page of checkpoints; four queries (the step range, holds, pins and open
    deletions), whatever the number of checkpoints."""
    present = selectors.with_kept_copy(Checkpoint.objects.filter(run=run, step__isnull=False))
    # The lowest step through the (run, step) index, stopping at the first with a kept copy (an aggregate probed
    # every checkpoint of the run: 20 ms for one of 5,000).
    low = present.order_by("step").values_list("step", flat=True).first()
    high = run.newest_step
    rows = run_placement.rows
    ids = [r.checkpoint.pk for r in rows]
    holds = [
        (ckpt, _hold_badge(case, mode, until))
        for ckpt, case, mode, until in Hold.objects.filter(run=run, released_at__isnull=True).values_list(
            "checkpoint_id", "case_ref", "mode", "retain_until"
        )
    ]
    pinned = set(
        Pin.objects.filter(checkpoint_id__in=ids, unpinned_at__isnull=True).values_list("checkpoint_id", flat=True)
    )
    deleting: dict[int, list[int]] = {}
    for job_id, ckpt_id in DeletionJob.objects.filter(
        checkpoint_id__in=ids, state__in=OPEN_DELETION_STATES
    ).values_list("pk", "checkpoint_id"):
        deleting.setdefault(ckpt_id, []).append(job_id)
    run_cases = sorted({case for ckpt, case in holds if ckpt is None})
    out = []
    for row in rows:
        ck = row.checkpoint
        position = None
        if ck.step is not None and low is not None and high is not None:
            position = 100.0 if high == low else round((ck.step - low) * 100 / (high - low), 2)
        states: dict[str, int] = {}
        tiers: dict[str, tuple[int, str]] = {}  # label: (tier order, label), so the hottest is named first
        reasons = []
        for p in row.copies:
            states[p.copy.state] = states.get(p.copy.state, 0) + 1
            shares = [(t.tier, t.storage_class or t.tier_label) for t in p.tiers]
            for tier, label in shares or [(p.location.tier, p.location.get_tier_display())]:
                tiers.setdefault(label, (placement.TIER_ORDER.get(tier, 99), label))
            reasons += [(p.location.name, r) for r in _copy_reasons(p.copy)]
        order = [CopyState.COMPLETE, CopyState.PARTIAL, CopyState.CORRUPT]
        out.append(
            TimelineRow(
                row=row,
                cells=list(zip(run_placement.columns, row.cells, strict=True)),
                position=position,
                states=sorted(states.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 9),
                tiers=[label for _, label in sorted(tiers.values())],
                verification=summarize(ck.present),
                pinned=ck.pk in pinned,
                holds=run_cases + sorted({case for ckpt, case in holds if ckpt == ck.pk}),
                deletions=deleting.get(ck.pk, []),
                reasons=reasons,
                newest=newest is not None and newest.pk == ck.pk,
            )
        )
    return {"rows": out, "low": low, "high": high, "run_held": bool(run_cases)}


@login_required
def checkpoint_detail(request, pk: int):
    try:
        checkpoint = selectors.checkpoint_with_run(pk)
        if not may_see_run(request.user, checkpoint.run):
            raise Checkpoint.DoesNotExist
    except Checkpoint.DoesNotExist:
        raise Http404("no such checkpoint") from None
    copies = selectors.checkpoint_copies(checkpoint)
    present = [c for c in copies if c.gone_at is None]
    gone = [c for c in copies if c.gone_at is not None]
    heads = selectors.copy_files_head(present, limit=FILES_SHOWN)
    layouts = layouts_of(present)
    drills: dict[int, list] = {}
    for d in RestoreDrill.objects.filter(copy__in=present).order_by("copy_id", "-started_at", "-pk"):
        if len(drills.setdefault(d.copy_id, [])) < 3:
            drills[d.copy_id].append(d)
    for copy in present:
        copy.head = heads.get(copy.pk, [])
        copy.files_not_shown = max(copy.file_count - len(copy.head), 0)
        copy.files_missing = max((copy.expected_files or 0) - copy.file_count, 0)
        diff = (copy.expected_bytes - copy.bytes) if copy.expected_bytes is not None else 0
        copy.bytes_short, copy.bytes_over = max(diff, 0), max(-diff, 0)
        copy.failure_domain = failure_domain(copy.location)
        copy.layout = layouts[copy.pk]
        copy.recent_drills = drills.get(copy.pk, [])
        # A mismatch that made the copy corrupt is already among its reasons.
        copy.verification_notes = [r for r in copy.verification_reasons if r not in copy.reasons]
    return render(
        request,
        "catalog/checkpoint_detail.html",
        {
            "checkpoint": checkpoint,
            "run": checkpoint.run,
            "copies": present,
            "gone": gone,
            "files_shown": FILES_SHOWN,
            "verification_summary": summarize(present),
            "placement": placement.checkpoint_placement(checkpoint, present),
        },
    )


@login_required
def copy_files(request, pk: int):
    copies = CheckpointCopy.objects.select_related("checkpoint__run__team", "location", "location__host")
    copy = get_object_or_404(restrict_runs(copies, request.user, run_path="checkpoint__run__"), pk=pk)
    paginator = Paginator(selectors.copy_files(copy), FILES_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    return render(
        request,
        "catalog/copy_files.html",
        {"copy": copy, "checkpoint": copy.checkpoint, "page_obj": page, "files": page.object_list},
    )


@login_required
def orphans(request):
    kind = request.GET.get("kind", "")
    kind = kind if kind in selectors.OrphanKind.values else ""
    location_id = positive_int_param(request, "location")
    groups = visible_orphans(selectors.orphans(kind=kind or None, location_id=location_id), request.user)
    paginator = Paginator(groups, ORPHAN_GROUPS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    return render(
        request,
        "catalog/orphans.html",
        {
            "page_obj": page,
            "groups": page.object_list,
            "totals": selectors.orphan_totals(groups),
            "total_bytes": sum(g.bytes or 0 for g in groups),
            "kinds": selectors.OrphanKind.choices,
            "kind": kind,
            "location_id": location_id,
            "filtered": bool(kind or location_id),
            "scoped": scoped_team_names(request.user) is not None,
            "can_clean_up": may_clean_up_orphans(request.user),
            "cleanable": selectors.CLEANABLE_KINDS,
            "lifecycle_rules": _lifecycle_rules(groups),
        },
    )


def _lifecycle_rules(groups: list) -> list:
    """The suggested AbortIncompleteMultipartUpload rule of each listed bucket that has incomplete uploads: one
    query, made whatever the groups, so the page's query count does not depend on the data."""
    ids = {g.location_id for g in groups if g.kind == selectors.OrphanKind.MULTIPART}
    with_uploads = (
        StorageLocation.objects.filter(multipart_uploads__gone_at__isnull=True)
        .distinct()
        .select_related("bucket")
        .order_by("name")
    )
    rules = (orphan_cleanup.lifecycle_rule(loc) for loc in with_uploads if loc.pk in ids)
    return [rule for rule in rules if rule is not None]


@login_required
def placement_overview(request):
    """Every placement flag of the fleet (or of one run) with its count, and the flagged checkpoints."""
    flag = request.GET.get("flag", "")
    flag = flag if flag in placement.Flag.values else ""
    run_id = positive_int_param(request, "run")
    run = None
    if run_id is not None:
        run = restrict_runs(Run.objects.select_related("team"), request.user).filter(pk=run_id).first()
        if run is None:
            raise Http404("no such run")

    # Each flag's query runs once: its ids give the count, the previews and the page.
    flagged = {
        f: placement.flagged_ids(restrict_runs(placement.flagged(f, run_id=run_id), request.user, run_path="run__"))
        for f in placement.Flag.values
    }
    cards = [
        {"flag": f, "label": placement.flag_label(f), "help": placement.flag_help(f), "count": len(ids)}
        for f, ids in flagged.items()
    ]
    page = None
    previews: dict[str, list] = {}
    if flag:
        page = Paginator(flagged[flag], FLAGGED_PER_PAGE).get_page(request.GET.get("page"))
        items = placement.explain([(flag, ck) for ck in placement.checkpoints_in_order(page.object_list)])
    else:
        shown = [(f, pk) for f, ids in flagged.items() for pk in ids[:FLAGGED_PREVIEW]]
        loaded = {ck.pk: ck for ck in placement.checkpoints_in_order([pk for _, pk in shown])}
        items = placement.explain([(f, loaded[pk]) for f, pk in shown if pk in loaded])
        for f, ck, why in items:
            previews.setdefault(f, []).append((ck, why))
    for card in cards:
        card["preview"] = previews.get(card["flag"], [])
    return render(
        request,
        "catalog/placement.html",
        {
            "cards": cards,
            "flag": flag,
            "flag_label": placement.flag_label(flag) if flag else "",
            "flag_help": placement.flag_help(flag) if flag else "",
            "run": run,
            "page_obj": page,
            "items": items if flag else [],
            "total": sum(c["count"] for c in cards),
            "nvme_days": placement.nvme_days(),
            "preview_size": FLAGGED_PREVIEW,
            "can_act": has_role(request.user, Role.OPERATOR),
            "bulk_options": PLACEMENT_BULK_OPTIONS,
        },
    )
