"""Which checkpoints the promises protect: read by pages, the simulator, policies and deletions."""

from __future__ import annotations

from django.db.models import Q

from actions.models import DeletionState, Hold, Pin
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
