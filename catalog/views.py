"""Pages of the catalog: runs, a run's checkpoints, one checkpoint's copies and their files, orphans.

Views only read request parameters and call selectors; what a page shows is decided there, so the
API and the pages cannot drift apart.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, render

from catalog import selectors
from catalog.choices import CopyState
from catalog.models import Checkpoint, CheckpointCopy
from catalog.verification import failure_domain, summarize
from ckptfleet.params import positive_int_param

RUNS_PER_PAGE = 50
CHECKPOINTS_PER_PAGE = 50
FILES_SHOWN = 200
FILES_PER_PAGE = 200
ORPHAN_GROUPS_PER_PAGE = 100


@login_required
def run_list(request):
    q = request.GET.get("q", "").strip()[:200]
    team_id = positive_int_param(request, "team")
    paginator = Paginator(selectors.run_search(q=q, team_id=team_id), RUNS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    teams = list(selectors.team_choices())
    filtered = bool(q or team_id)
    return render(
        request,
        "catalog/run_list.html",
        {
            "page_obj": page,
            "runs": page.object_list,
            "teams": teams,
            "q": q,
            "team_id": team_id,
            "filtered": filtered,
            # No run at all and no filter: the fleet has reported nothing yet.
            "fleet_is_empty": paginator.count == 0 and not filtered,
        },
    )


@login_required
def run_detail(request, pk: int):
    run = get_object_or_404(selectors.run_list(), pk=pk)
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
    for checkpoint in page.object_list:
        checkpoint.verification_summary = summarize(checkpoint.present)
    return render(
        request,
        "catalog/run_detail.html",
        {
            "run": run,
            "page_obj": page,
            "checkpoints": page.object_list,
            "newest": newest,
            "newest_copies": newest_copies,
        },
    )


@login_required
def checkpoint_detail(request, pk: int):
    try:
        checkpoint = selectors.checkpoint_with_run(pk)
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
        },
    )


@login_required
def copy_files(request, pk: int):
    copy = get_object_or_404(
        CheckpointCopy.objects.select_related("checkpoint__run__team", "location", "location__host"), pk=pk
    )
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
