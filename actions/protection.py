"""Which checkpoints the promises protect: read by pages, the simulator, policies and deletions."""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone

from actions.models import DeletionJob, DeletionState, Hold, Lease, Pin
from catalog.models import Checkpoint


def active_holds(checkpoint):
    """The unreleased holds that cover ``checkpoint``: its own, and its run's."""
    return Hold.objects.filter(released_at__isnull=True).filter(
        Q(checkpoint=checkpoint) | Q(run_id=checkpoint.run_id, checkpoint__isnull=True)
    )


def is_held(checkpoint) -> bool:
    return active_holds(checkpoint).exists()


def is_pinned(checkpoint) -> bool:
    return Pin.objects.filter(checkpoint=checkpoint, unpinned_at__isnull=True).exists()


def protected_ids(run_ids) -> tuple[set[int], set[int]]:
    """(held checkpoint ids, pinned checkpoint ids) among the checkpoints of ``run_ids``, in two queries."""

    run_ids = list(run_ids)
    holds = Hold.objects.filter(released_at__isnull=True, run_id__in=run_ids).values_list("run_id", "checkpoint_id")
    whole_runs = {run for run, ckpt in holds if ckpt is None}
    held = {ckpt for _, ckpt in holds if ckpt is not None}
    if whole_runs:
        held |= set(Checkpoint.objects.filter(run_id__in=whole_runs).values_list("id", flat=True))
    pinned = set(
        Pin.objects.filter(unpinned_at__isnull=True, checkpoint__run_id__in=run_ids).values_list(
            "checkpoint_id", flat=True
        )
    )
    return held, pinned


OPEN_DELETION_STATES = (DeletionState.AWAITING_APPROVAL, DeletionState.SCHEDULED, DeletionState.RUNNING)


def protection_reasons(checkpoint_ids, *, open_deletions: bool = True) -> dict[int, str]:
    """{checkpoint id: why} for the checkpoints among ``checkpoint_ids`` that are held, pinned, leased or scheduled
    for deletion: what the ingest may not take a copy or a file away from (``catalog.hooks.protections``).

    A copy that moved to another checkpoint would leave the protection covering nothing (issue 26): four
    queries for the whole batch, and the ingest asks only when a copy or file would change checkpoint.
    """
    ids = list(checkpoint_ids)
    why: dict[int, list[str]] = {}
    runs = dict(Checkpoint.objects.filter(pk__in=ids).values_list("pk", "run_id"))
    holds = Hold.objects.filter(released_at__isnull=True).filter(
        Q(checkpoint_id__in=ids) | Q(run_id__in=set(runs.values()), checkpoint__isnull=True)
    )
    for hold_id, run_id, checkpoint_id, mode in holds.values_list("pk", "run_id", "checkpoint_id", "mode"):
        covered = [checkpoint_id] if checkpoint_id else [pk for pk, run in runs.items() if run == run_id]
        for pk in covered:
            why.setdefault(pk, []).append(f"{mode} hold {hold_id}")
    for pk in Pin.objects.filter(checkpoint_id__in=ids, unpinned_at__isnull=True).values_list(
        "checkpoint_id", flat=True
    ):
        why.setdefault(pk, []).append("pinned")
    leased = Lease.objects.filter(checkpoint_id__in=ids, released_at__isnull=True, expires_at__gt=timezone.now())
    for pk in leased.values_list("checkpoint_id", flat=True).distinct():
        why.setdefault(pk, []).append("leased")
    jobs = DeletionJob.objects.filter(checkpoint_id__in=ids, state__in=OPEN_DELETION_STATES)
    for pk, job_id in jobs.values_list("checkpoint_id", "pk") if open_deletions else ():
        why.setdefault(pk, []).append(f"deletion {job_id} open")
    return {pk: ", ".join(dict.fromkeys(reasons)) for pk, reasons in why.items()}
