"""Pages of the catalog: runs, a run's checkpoints, one checkpoint's copies and their files, orphans.

Views only read request parameters and call selectors; what a page shows is decided there, so the
API and the pages cannot drift apart.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, render

from access.scoping import may_see_run, restrict_runs
from catalog import placement, selectors
from catalog.choices import CopyState, RunStatus
from catalog.models import Checkpoint, CheckpointCopy, Run
from catalog.run_filters import SORTS, RunFilters
from catalog.verification import failure_domain, summarize
from ckptfleet.params import positive_int_param
from fleet.choices import Tier

RUNS_PER_PAGE = 50
CHECKPOINTS_PER_PAGE = 50
FILES_SHOWN = 200
FILES_PER_PAGE = 200
ORPHAN_GROUPS_PER_PAGE = 100
FLAGGED_PER_PAGE = 50
FLAGGED_PREVIEW = 5


@login_required
def run_list(request):
    filters = RunFilters.from_params(request.GET)
    paginator = Paginator(restrict_runs(filters.apply(), request.user), RUNS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    teams = list(selectors.team_choices())
    return render(
        request,
        "catalog/run_list.html",
        {
            "page_obj": page,
            "runs": page.object_list,
            "teams": teams,
            "filters": filters,
            "q": filters.q,
            "team_id": filters.team_id,
            "filtered": filters.narrowed,
            "statuses": RunStatus.choices,
            "tiers": Tier.choices,
            "flags": placement.Flag.choices,
            "sorts": [(key, label) for key, (label, _) in SORTS.items()],
            "page_query": filters.query(),
            # No run at all and no filter: the fleet has reported nothing yet.
            "fleet_is_empty": paginator.count == 0 and not filters.narrowed,
        },
    )


@login_required
def run_detail(request, pk: int):
    run = get_object_or_404(restrict_runs(selectors.run_list(), request.user), pk=pk)
    paginator = Paginator(selectors.run_checkpoints(run), CHECKPOINTS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    newest = selectors.newest_complete(run)
    newest_copies = []
    if newest is not None:
        newest_copies = list(
            selectors.present_copies()
            .filter(checkpoint=newest, state=CopyState.COMPLETE)
            .select_related("location", "location__host")
            .order_by("location__name")
        )
    checkpoints = list(page.object_list)
    for checkpoint in checkpoints:
        checkpoint.verification_summary = summarize(checkpoint.present)
    return render(
        request,
        "catalog/run_detail.html",
        {
            "run": run,
            "page_obj": page,
            "checkpoints": checkpoints,
            "newest": newest,
            "newest_copies": newest_copies,
            "placement": placement.run_placement(run.pk, checkpoints),
        },
    )


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
    for copy in present:
        copy.head = heads.get(copy.pk, [])
        copy.files_not_shown = max(copy.file_count - len(copy.head), 0)
        copy.files_missing = max((copy.expected_files or 0) - copy.file_count, 0)
        diff = (copy.expected_bytes - copy.bytes) if copy.expected_bytes is not None else 0
        copy.bytes_short, copy.bytes_over = max(diff, 0), max(-diff, 0)
        copy.failure_domain = failure_domain(copy.location)
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
    groups = selectors.orphans(kind=kind or None, location_id=location_id)
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
        },
    )


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
        {"flag": f, "label": placement.Flag(f).label, "help": placement.flag_help(f), "count": len(ids)}
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
            "flag_label": placement.Flag(flag).label if flag else "",
            "flag_help": placement.flag_help(flag) if flag else "",
            "run": run,
            "page_obj": page,
            "items": items if flag else [],
            "total": sum(c["count"] for c in cards),
            "nvme_days": placement.nvme_days(),
            "preview_size": FLAGGED_PREVIEW,
        },
    )
