"""Moves: demote a checkpoint copy to a colder bucket or storage class, or offload it from a host to a bucket.

A move is a promotion job run the other way (``Direction.DEMOTE`` / ``OFFLOAD``) with one more promise:
the source is freed only after every new object has been verified against the recorded checksums
(PRODUCT.md promise 6), and it is freed through ``actions.services.schedule_deletion``, so the
deletion's own rules (holds, pins, approval, grace period, blast radius, the re-check at execution)
decide whether and when the source goes. An in-place storage-class change (CopyObject onto the same
key with a new StorageClass) replaces the object itself and needs no deletion.

- ``move_plan`` says what a move would do, per checkpoint and in total, and names what it leaves out;
- ``request_move`` creates one job per checkpoint in one transaction, one ``move.request`` event each;
- the runner copies (bucket to bucket) or the host's agent uploads (``promotion.pushes``); then
- ``copied`` verifies every new object, writes ``move.verified`` and frees the source (``free_source``).

The package: ``plan`` (figures and exclusions), ``request`` (the jobs and their frozen files), ``verify``
(``copied``, ``free_source``). The names below are its public face; ``promotion.moves.copied`` is what the
host agent's push reports call.
"""

from promotion.moves.plan import (
    ARCHIVE_CLASSES,
    FREED_BY_DELETION,
    FREED_IN_PLACE,
    MOVE_CLASSES,
    Excluded,
    MoveLine,
    MovePlan,
    cents,
    move_plan,
    payback_days,
)
from promotion.moves.request import freeze_move_items, request_move
from promotion.moves.verify import (
    Mismatch,
    copied,
    due_verifying,
    free_source,
    requester,
    verify_deadline,
    verify_object,
)

__all__ = [
    "ARCHIVE_CLASSES",
    "FREED_BY_DELETION",
    "FREED_IN_PLACE",
    "MOVE_CLASSES",
    "Excluded",
    "Mismatch",
    "MoveLine",
    "MovePlan",
    "cents",
    "copied",
    "due_verifying",
    "free_source",
    "freeze_move_items",
    "move_plan",
    "payback_days",
    "request_move",
    "requester",
    "verify_deadline",
    "verify_object",
]
