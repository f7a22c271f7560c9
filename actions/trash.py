"""Soft delete in buckets: moving exact object versions to a recoverable trash, purging and restoring them.

Only store operations live here; the executor (``actions.execution``) and the soft-delete services
(``actions.softdelete``) record what they did. Every function works on exact keys and versions:

- a bucket with versioning Enabled: a planned version that is the current one is hidden by a delete
  marker (a version-less DeleteObject), whose own version id is the item's ``trash_ref``; the listing
  right after must show that marker current and the planned version directly below it, or the marker is
  removed again at once and the item skipped as changed (a version written meanwhile is never hidden).
  A planned version that is non-current already is trashed as it is (``trash_ref`` empty). Purge deletes
  the planned version by id, then the marker by id; restore deletes the marker by id.
- any other bucket (no versioning, versioning suspended, status unreadable): the object is copied
  server-side, conditional on its ETag, to ``TRASH_PREFIX/<job>/<key>`` at the bucket's root (outside the
  location's prefix; a bucket scan skips it), then the original is deleted as a hard deletion would. Purge
  deletes the trash copy; restore copies it back, only while the original key is free, in the storage class the
  object had (``original_class``), and deletes it.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fleet import s3

log = logging.getLogger(__name__)

TRASH_PREFIX = s3.TRASH_PREFIX  # at a bucket's root, and below a host's root as a directory
THREADS = 16


# What S3 answers a copy of an object in GLACIER or DEEP_ARCHIVE that is not restored (moto says the second):
# without versioning its bytes cannot reach the trash, so it stays, and says so.
ARCHIVED_CODES = ("InvalidObjectState", "ObjectNotInActiveTierError")
ARCHIVED_SKIP = (
    "left in place: it is in an archive storage class (GLACIER or DEEP_ARCHIVE), which S3 cannot copy to the trash "
    "until it is restored; restore it first, or delete it with no recovery window at this location"
)


def trash_key(job_id: int, path: str) -> str:
    return f"{TRASH_PREFIX}{job_id}/{path}"


@dataclass(frozen=True)
class Moved:
    """What became of one object sent to the trash: ``outcome`` as a hard delete's, plus where it went."""

    outcome: s3.DeleteOutcome
    trash_ref: str = ""
    trash_version_id: str = ""
    skip: str = ""  # left in place, in words; the item is skipped


def _pool(fn, items: list) -> list:
    if not items:
        return []
    with ThreadPoolExecutor(max_workers=min(THREADS, len(items))) as pool:
        return list(pool.map(fn, items))


def _hide(client: Any, bucket: str, key: str, version_id: str) -> Moved:
    """Hide the planned version ``version_id`` of ``key`` behind a delete marker, or say why not."""
    history = s3.key_versions(client, bucket, key, markers=True)
    planned = next((v for v in history if not v.delete_marker and v.version_id == version_id), None)
    if planned is None:
        return Moved(s3.DeleteOutcome(key, version_id), skip="missing: the planned version is gone from the store")
    if not planned.latest:
        # Non-current already: nothing reads it by the key; it stays as it is until purged.
        return Moved(s3.DeleteOutcome(key, version_id, deleted=True))
    answer = s3.delete_objects(client, bucket, [(key, "", "")])[0]
    marker = answer.marker_version_id
    if not marker:
        return Moved(s3.DeleteOutcome(key, version_id, code=answer.code, message=answer.message))
    after = s3.key_versions(client, bucket, key, markers=True)
    current = [v for v in after if v.latest]
    below = next((v for v in after if not v.delete_marker), None)
    if current and current[0].version_id == marker and below is not None and below.version_id == version_id:
        return Moved(s3.DeleteOutcome(key, version_id, deleted=True), trash_ref=marker)
    drop_marker(client, bucket, key, marker)
    return Moved(
        s3.DeleteOutcome(key, version_id),
        skip="changed since scheduling: a new version was written while it was moved to the trash; left alone",
    )


def drop_marker(client: Any, bucket: str, key: str, marker: str) -> bool:
    outcome = s3.delete_objects(client, bucket, [(key, marker, "")])[0]
    if not outcome.deleted:
        log.warning("trash: delete marker %s of %s stays: %s %s", marker, key, outcome.code, outcome.message)
    return outcome.deleted


def _copy_to_trash(client: Any, bucket: str, job_id: int, item: Any) -> Moved | tuple[str, str]:
    """Copy one object to its trash key (conditional on the planned ETag): (key, version id), or why not."""
    target = trash_key(job_id, item.path)
    try:
        s3.copy_object(
            client,
            source_bucket=bucket,
            source_key=item.path,
            target_bucket=bucket,
            target_key=target,
            size=item.size,
            storage_class="STANDARD",
            source_etag=item.etag,
            source_version_id=item.version_id if item.version_id != "null" else "",
        )
        state = s3.object_state(client, bucket, target)
    except s3.S3Error as exc:
        if exc.code in ("PreconditionFailed", "412"):
            return Moved(s3.DeleteOutcome(item.path, item.version_id), skip="changed since scheduling: ETag differs")
        if exc.code in ("NoSuchKey", "404", "NotFound", "NoSuchVersion"):
            return Moved(s3.DeleteOutcome(item.path, item.version_id), skip="missing: already gone from the store")
        if exc.transient:
            return Moved(s3.DeleteOutcome(item.path, item.version_id, code="SlowDown", message=exc.message))
        if exc.code in ARCHIVED_CODES:
            return Moved(s3.DeleteOutcome(item.path, item.version_id), skip=ARCHIVED_SKIP)
        return Moved(
            s3.DeleteOutcome(item.path, item.version_id),
            skip=f"left in place: it could not be copied to the trash: {exc.message}",
        )
    if state is None or state.size != item.size:
        return Moved(s3.DeleteOutcome(item.path, item.version_id, code="SlowDown", message="trash copy not readable"))
    return target, state.version_id


def move(
    client: Any, bucket: str, job_id: int, items: list, *, versioning: str | None, condition: str = ""
) -> list[Moved]:
    """Move each item (its exact version known, or its ETag checked) to the trash; one ``Moved`` per item.

    Without versioning the original is compared again once its trash copy is made (size and ETag, HEAD): an
    object rewritten after the executor's check or during the copy is left as it is now and its trash copy
    removed, rather than deleted with its new bytes while the job says "recoverable". The delete then carries
    the ETag as the store honours it (``condition``, ``s3.delete_exact``); on a store that honours none
    only the milliseconds between that HEAD and the delete remain open, and a hard delete there is refused.
    """
    if versioning == "Enabled":
        return _pool(lambda i: _hide(client, bucket, i.path, i.version_id), items)
    copies = _pool(lambda i: _copy_to_trash(client, bucket, job_id, i), items)
    copied = [(i, c) for i, c in zip(items, copies, strict=True) if isinstance(c, tuple)]
    again = _pool(lambda ic: _unchanged(client, bucket, ic[0]), copied)
    moved_by_pk: dict[int, Moved] = {}
    for (item, copy), why in zip(copied, again, strict=True):
        if why:
            s3.delete_objects(client, bucket, [(copy[0], copy[1], "")])
            moved_by_pk[item.pk] = why
    sending = [(i, c) for i, c in copied if i.pk not in moved_by_pk]
    deleted = (
        dict(
            zip(
                (i.pk for i, _c in sending),
                s3.delete_exact(
                    client, bucket, [(i.path, i.version_id, i.etag) for i, _c in sending], condition=condition
                ),
                strict=True,
            )
        )
        if sending
        else {}
    )
    moved: list[Moved] = []
    for item, copy in zip(items, copies, strict=True):
        if not isinstance(copy, tuple):
            moved.append(copy)
            continue
        if item.pk in moved_by_pk:
            moved.append(moved_by_pk[item.pk])
            continue
        outcome = deleted[item.pk]
        if not outcome.deleted:
            # The original stays (refused, changed, or unconfirmed): so must nothing of it in the trash.
            s3.delete_objects(client, bucket, [(copy[0], copy[1], "")])
            moved.append(Moved(outcome))
            continue
        moved.append(Moved(outcome, trash_ref=copy[0], trash_version_id=copy[1]))
    return moved


def _unchanged(client: Any, bucket: str, item: Any) -> Moved | None:
    """None when the original still holds what was copied to the trash (size and ETag), else why it is left."""
    if item.version_id and item.version_id != "null":
        return None  # an exact version: its delete cannot reach another one
    try:
        state = s3.object_state(client, bucket, item.path)
    except s3.S3Error as exc:
        return Moved(s3.DeleteOutcome(item.path, item.version_id, code="SlowDown", message=exc.message))
    if state is None:
        return Moved(s3.DeleteOutcome(item.path, item.version_id), skip="missing: already gone from the store")
    if state.size != item.size or (item.etag and state.etag != item.etag):
        return Moved(
            s3.DeleteOutcome(item.path, item.version_id),
            skip="changed since scheduling: rewritten while it was copied to the trash; left as it is now",
        )
    return None


def copied(item: Any) -> bool:
    """Whether the item went to the trash as a copy (its ``trash_ref`` is a trash key), not behind a marker."""
    return item.trash_ref.startswith(TRASH_PREFIX)


def _purge_target(item: Any) -> tuple[str, str, str]:
    return (item.trash_ref, item.trash_version_id, "") if copied(item) else (item.path, item.version_id, "")


def purge(client: Any, bucket: str, items: list) -> list[s3.DeleteOutcome]:
    """Delete trashed items for good: the planned version then its marker, or the trash copy. One outcome each
    (of the version or trash copy; a marker that stays is logged and purged by the next run as well)."""
    if not items:
        return []
    outcomes: list[s3.DeleteOutcome] = []
    for start in range(0, len(items), s3.DELETE_BATCH):
        chunk = items[start : start + s3.DELETE_BATCH]
        outcomes.extend(s3.delete_objects(client, bucket, [_purge_target(i) for i in chunk]))
    gone_code = ("NoSuchVersion", "NoSuchKey", "404")
    markers = [
        (i.path, i.trash_ref, "")
        for i, o in zip(items, outcomes, strict=True)
        if i.trash_ref and not copied(i) and (o.deleted or o.code in gone_code)
    ]
    if markers:
        for start in range(0, len(markers), s3.DELETE_BATCH):
            for left in s3.delete_objects(client, bucket, markers[start : start + s3.DELETE_BATCH]):
                if not left.deleted:
                    log.warning("purge: delete marker %s of %s stays: %s", left.version_id, left.key, left.code)
    return outcomes


def original_class(item: Any) -> str:
    """The storage class the object had where the plan found it (the scan's listing of it), for its restore: a copy
    back names a class, and one left to the default would put a STANDARD_IA or INTELLIGENT_TIERING object back in
    STANDARD, billed at another price. "" (the store's default, STANDARD) when the scan recorded none."""
    shard = item.shard_file if item.shard_file_id else None
    return shard.storage_class if shard is not None else ""


def restore(client: Any, bucket: str, item: Any) -> str:
    """Put one trashed item back where it was: "" when done, or why not, in words. Raises S3Error to retry.

    Safe to repeat after a crash: a marker already gone, or a copy already back (the original present again
    and the trash copy gone), counts as restored.
    """
    if not copied(item):
        if item.trash_ref and not drop_marker(client, bucket, item.path, item.trash_ref):
            history = s3.key_versions(client, bucket, item.path, markers=True)
            if any(v.version_id == item.trash_ref for v in history):
                return "not restored: the store refused to remove the delete marker"
        return ""
    present = s3.object_state(client, bucket, item.path)
    if present is not None:
        trash_copy = s3.object_state(client, bucket, item.trash_ref, version_id=item.trash_version_id)
        if trash_copy is None and present.size == item.size:
            return ""  # put back by an earlier try that did not get to record it
        return "not restored: the key holds another object now; the trash copy stays until the window ends"
    s3.copy_object(
        client,
        source_bucket=bucket,
        source_key=item.trash_ref,
        target_bucket=bucket,
        target_key=item.path,
        size=item.size,
        storage_class=original_class(item),
        source_version_id=item.trash_version_id if item.trash_version_id != "null" else "",
    )
    s3.delete_objects(client, bucket, [(item.trash_ref, item.trash_version_id, "")])
    return ""
