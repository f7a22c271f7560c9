"""The "reclaim not proven" kind of the problems list: deletions whose proof of reclaim failed (``actions.reclaim``).

A deletion, move or clean-up that said it freed objects the store still holds (or whose trash copy is missing) is a
row here, with what is still stored, what it costs, and the fix, until a later proof confirms the reclaim.
"""

from __future__ import annotations

from django.db.models import OuterRef, Q, Subquery
from django.urls import reverse

from access.scoping import scoped_team_names
from actions.models import DeletionItem, DeletionJob, ProofState
from dashboard.problems import MORE_SOURCES, Filters, Kind, Prices, Problem, Source
from fleet.models import StorageLocation

RECLAIM_ROWS = 500  # failed proofs listed, newest first; each is a job someone must look at


def reclaim_source(filters: Filters, user, prices: Prices) -> Source:
    """Deletions whose proof of reclaim failed (``actions.reclaim``): what the store still holds, and the fix."""
    jobs = DeletionJob.objects.filter(proof_state=ProofState.FAILED).select_related(
        "checkpoint__run__team", "orphan_location", "orphan_run__team"
    )
    names = scoped_team_names(user)
    if names is not None:
        jobs = jobs.filter(
            Q(checkpoint__run__team__name__in=sorted(names)) | Q(orphan_run__team__name__in=sorted(names))
        )
    if filters.team_id is not None:
        jobs = jobs.filter(Q(checkpoint__run__team_id=filters.team_id) | Q(orphan_run__team_id=filters.team_id))
    if filters.run_id is not None:
        jobs = jobs.filter(Q(checkpoint__run_id=filters.run_id) | Q(orphan_run_id=filters.run_id))
    if filters.location_id is not None:
        jobs = jobs.filter(items__location_id=filters.location_id).distinct()
    if filters.since_before is not None:
        jobs = jobs.filter(proof_at__lte=filters.since_before)
    first_location = DeletionItem.objects.filter(job=OuterRef("pk")).order_by("location_id").values("location_id")
    rows = list(jobs.annotate(where=Subquery(first_location[:1])).order_by("-proof_at", "-pk")[:RECLAIM_ROWS])
    locations = StorageLocation.objects.in_bulk({j.where for j in rows if j.where is not None})
    items = []
    for job in rows:
        run = job.checkpoint.run if job.checkpoint_id else job.orphan_run
        url = reverse("actions:deletion-detail", args=[job.pk])
        reasons = [job.proof_detail]
        reasons += [f"{f['key']}: {f['reason']}" for f in job.proof_failures[:3]]
        if len(job.proof_failures) > 3:
            reasons.append(f"and {len(job.proof_failures) - 3} more on the deletion's page")
        reasons.append(RECLAIM_FIX)
        location = job.orphan_location or locations.get(job.where)
        items.append(
            Problem(
                kind=Kind.RECLAIM,
                subject="deletion",
                subject_label=f"deletion {job.pk}: {job.subject}",
                subject_url=url,
                reasons=reasons,
                since=job.proof_at,
                bytes=job.bytes_unproven,
                cost=prices.orphan_cost(location.pk, job.bytes_unproven) if location is not None else None,
                action_label="Check again",
                action_url=url,
                key=f"reclaim-{job.pk}",
                run_id=run.pk if run is not None else None,
                run_label=str(run) if run is not None else "",
                team=run.team.name if run is not None and run.team is not None else "",
                checkpoint_id=job.checkpoint_id,
                location_id=location.pk if location is not None else None,
                location_name=location.name if location is not None else "",
                location_url=reverse("fleet:location-detail", args=[location.pk]) if location is not None else "",
            )
        )
    return Source(kind=Kind.RECLAIM, queryset=None, to_problem=lambda r: r, items=items)


RECLAIM_FIX = (
    "Fix: open the deletion and look at what is still stored. A version kept behind a delete marker, or a "
    'gateway that answered "deleted" without deleting, needs the delete sent again (a new deletion of the '
    "checkpoint or copy, or the store's console); an object written again at the key belongs to whoever wrote it. "
    'Then press "Check again" on the deletion\'s page.'
)


MORE_SOURCES[Kind.RECLAIM] = reclaim_source
