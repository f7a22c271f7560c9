"""Proof of reclaim: after a deletion ends, ask the store again whether what it freed is really gone (or in the trash).

A job's items say what the store answered to each delete; a store can still keep the data: a versioned bucket that
only added a delete marker, a proxy or gateway that answered "deleted" and did nothing, an object written again at
the key before anyone looked. So once a job ends (``execution.finish`` queues ``actions.tasks.prove_reclaim`` after
commit), and again after a purge of its trash, every item the job counted as freed is checked against a fresh
listing of its bucket (ListObjectVersions of the items' directories, the delete markers and the trash included):

- deleted, with a version id: that version is listed no more (neither current nor non-current);
- deleted, in a bucket without versioning: no object is current at the key;
- deleted from the trash (purged): the trash copy is listed no more;
- in the trash: the trash copy is listed (versioned bucket: the planned version, no longer current; otherwise the
  copy under ``TRASH_PREFIX``), and the original is not current with the planned content;
- an aborted multipart upload: ListMultipartUploads no longer lists its upload id.

Files on hosts are proved by their agent's deletion report (the agent stats each file after it removed or moved it
and says so per file), so their items count as confirmed by that report.

The bytes proved gone are the bytes reclaimed, priced per month at the price book's price of the day of the proof
for the location's tier and the object's storage class (Decimal). A proof that finds anything still stored ends
``failed``, listing each key, version and why, and the job is a problem in the problems list
(``dashboard.problems``) until a later proof confirms it. The proof is idempotent: it recomputes the whole answer
from the store each time; it is audited (``deletion.proof``) when its verdict or its figures change.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone

from actions import trash
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemKind, ItemState, ProofState
from actions.services import audit_job_event
from audit.actor import Actor
from ckptfleet.celery import task
from ckptfleet.errors import DomainError
from fleet import s3
from fleet.choices import LocationKind
from fleet.models import Bucket
from fleet.pricebook import GIB, PriceBook, utc_today

log = logging.getLogger(__name__)

WORKER = Actor.worker("reclaim proof")
PROVABLE = (DeletionState.COMPLETED, DeletionState.BLOCKED, DeletionState.FAILED, DeletionState.RESTORED)
MAX_FAILURES = 50  # listed on the job; the count and bytes cover them all
MONEY_PLACES = Decimal("0.000000000001")
TASK = "actions.tasks.prove_reclaim"


def queue(job_id: int) -> None:
    """Prove the job's reclaim after the caller's transaction commits (by task name: the task module imports us)."""
    transaction.on_commit(lambda: task(TASK).delay(job_id))


def request_proof(*, job: DeletionJob, actor: Actor, request_id: str = "") -> None:
    """An operator asks for the proof again ("Check again"): audited, and the proof runs after commit.

    Only an ended job has something to prove; the proof itself is idempotent, so asking twice is harmless."""
    with transaction.atomic():
        locked = DeletionJob.objects.select_for_update(of=("self",)).filter(pk=job.pk).first()
        if locked is None or locked.state not in PROVABLE:
            state = locked.get_state_display().lower() if locked is not None else "gone"
            raise DomainError(f"deletion {job.pk} is {state}: only an ended deletion has a reclaim to prove")
        audit_job_event(
            locked,
            actor,
            "deletion.proof_request",
            before={"deletion": locked.pk, "proof_state": locked.proof_state},
            after={"deletion": locked.pk},
            request_id=request_id,
        )
        queue(locked.pk)


@dataclass(frozen=True)
class Reclaimed:
    """What the deletions that ended in a period are proved to have freed, fleet-wide (or for some teams)."""

    jobs: int
    bytes: int
    monthly: Decimal
    currency: str
    unpriced: int  # jobs with bytes reclaimed but no price for them
    failed: int  # jobs whose proof failed: their figures count only what is proved gone


def reclaimed(*, start, end, team_ids: list[int] | None = None) -> Reclaimed:
    """The proved reclaim of deletions that ended in ``[start, end)``: one aggregate query."""
    rows = DeletionJob.objects.filter(
        finished_at__gte=start, finished_at__lt=end, proof_state__in=(ProofState.CONFIRMED, ProofState.FAILED)
    )
    if team_ids is not None:
        rows = rows.filter(Q(checkpoint__run__team_id__in=team_ids) | Q(orphan_run__team_id__in=team_ids))
    agg = rows.aggregate(
        jobs=Count("pk"),
        nbytes=Sum("bytes_reclaimed"),
        money=Sum("money_reclaimed"),
        unpriced=Count("pk", filter=Q(money_reclaimed__isnull=True, bytes_reclaimed__gt=0)),
        failed=Count("pk", filter=Q(proof_state=ProofState.FAILED)),
        currency=Max("money_currency"),
    )
    return Reclaimed(
        jobs=agg["jobs"] or 0,
        bytes=agg["nbytes"] or 0,
        monthly=Decimal(agg["money"] or 0).quantize(MONEY_PLACES),
        currency=agg["currency"] or "",
        unpriced=agg["unpriced"] or 0,
        failed=agg["failed"] or 0,
    )


@dataclass
class Proof:
    confirmed: int = 0
    reclaimed: int = 0
    in_trash: int = 0
    unproven: int = 0
    by_price: dict[tuple[int, str], int] = field(default_factory=lambda: defaultdict(int))
    failures: list[dict[str, Any]] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)

    def gone(self, item: DeletionItem) -> None:
        self.confirmed += 1
        self.reclaimed += item.size
        storage_class = item.shard_file.storage_class if item.shard_file_id and item.shard_file else ""
        self.by_price[(item.location_id, storage_class)] += item.size

    def trashed(self, item: DeletionItem) -> None:
        self.confirmed += 1
        self.in_trash += item.size

    def failed(self, item: DeletionItem, reason: str) -> None:
        self.unproven += item.size
        self.failures.append(
            {"item": item.pk, "key": item.path, "version_id": item.version_id, "bytes": item.size, "reason": reason}
        )


def prove(job_id: int) -> str:
    """Check what job ``job_id`` freed against the store, record the verdict and figures; returns the verdict.

    The store is asked outside any transaction; the answer is recorded under the job's row lock. A job that has not
    ended (or does not exist) is left alone ("").
    """
    job = DeletionJob.objects.filter(pk=job_id).first()
    if job is None or job.state not in PROVABLE:
        return ""
    items = list(
        DeletionItem.objects.filter(job=job, state__in=(ItemState.DELETED, ItemState.TRASHED))
        .select_related("location", "shard_file")
        .order_by("location_id", "pk")
    )
    proof = Proof()
    by_location: dict[int, list[DeletionItem]] = defaultdict(list)
    for item in items:
        if item.location.kind == LocationKind.BUCKET:
            by_location[item.location_id].append(item)
        elif item.state == ItemState.TRASHED:
            proof.trashed(item)  # the agent moved it and reported so, file by file
        else:
            proof.gone(item)
    for location_id, group in by_location.items():
        try:
            _prove_bucket(location_id, group, proof)
        except s3.S3Error as exc:
            proof.unchecked.append(f"{group[0].location.name}: {exc.message}")
    return _record(job_id, proof)


def _prove_bucket(location_id: int, items: list[DeletionItem], proof: Proof) -> None:
    bucket = Bucket.objects.select_related("location").get(location_id=location_id)
    client = s3.client_for(bucket)
    name = bucket.bucket_name
    uploads = [i for i in items if i.kind == ItemKind.UPLOAD]
    files = [i for i in items if i.kind != ItemKind.UPLOAD]
    keys = {i.path for i in files} | {i.trash_ref for i in files if trash.copied(i)}
    listed = s3.versions_of_keys(client, name, sorted(keys)) if keys else {}
    for item in files:
        here = listed.get(item.path, [])
        current = next((v for v in here if v.latest), None)
        if trash.copied(item):
            copies = [v for v in listed.get(item.trash_ref, []) if _is(v, item.trash_version_id)]
            if item.state == ItemState.DELETED:
                if copies:
                    proof.failed(item, f"the trash copy {item.trash_ref} is still stored after its purge")
                else:
                    proof.gone(item)
            elif not copies:
                proof.failed(item, f"the trash copy {item.trash_ref} is missing: nothing could be restored")
            elif current is not None and _same_content(current, item):
                proof.failed(item, "the original is still the current object at its key, beside its trash copy")
            else:
                proof.trashed(item)
            continue
        if item.version_id and item.version_id != "null":
            kept = next((v for v in here if v.version_id == item.version_id), None)
            if item.state == ItemState.TRASHED:
                if kept is None:
                    proof.failed(item, "the version meant to be in the trash is gone: nothing could be restored")
                elif kept.latest:
                    proof.failed(item, "the version meant to be in the trash is still the current object")
                else:
                    proof.trashed(item)
            elif kept is not None:
                where = "the current version" if kept.latest else "a noncurrent version (behind a delete marker)"
                proof.failed(item, f"version {item.version_id} is still stored, as {where}")
            else:
                proof.gone(item)
            continue
        if current is not None:
            again = "" if _same_content(current, item) else " (other content: written again since the delete?)"
            proof.failed(item, f"an object is still current at the key{again}")
        else:
            proof.gone(item)
    if uploads:
        prefixes = sorted({u.path[: u.path.rfind("/") + 1] for u in uploads})
        open_ids: set[str] = set()
        for prefix in prefixes:
            answer = s3.multipart_uploads(client, name, prefix)
            if answer is None:
                raise s3.S3Error(f"ListMultipartUploads of s3://{name}/{prefix} is not offered", code="AccessDenied")
            open_ids.update(u.upload_id for u in answer)
        for item in uploads:
            if item.upload_id in open_ids:
                proof.failed(item, f"multipart upload {item.upload_id} is still open: its parts are still billed")
            else:
                proof.gone(item)


def _is(version: s3.VersionInfo, version_id: str) -> bool:
    return not version_id or version_id == "null" or version.version_id == version_id


def _same_content(version: s3.VersionInfo, item: DeletionItem) -> bool:
    return version.size == item.size and (not item.etag or not version.etag or version.etag == item.etag)


def _price(proof: Proof) -> tuple[Decimal | None, str]:
    """What the reclaimed bytes cost per month at today's prices, or None when a location has no price."""
    if not proof.by_price:
        return Decimal(0), ""
    from fleet.models import StorageLocation

    book = PriceBook.load()
    today = utc_today()
    locations = StorageLocation.objects.in_bulk({loc for loc, _ in proof.by_price})
    total = Decimal(0)
    for (location_id, storage_class), nbytes in proof.by_price.items():
        location = locations[location_id]
        price = book.price(location, location.tier, storage_class, today)
        if price is None and storage_class:
            price = book.price(location, location.tier, "", today)
        if price is None:
            return None, book.currency
        total += Decimal(nbytes) * price / GIB
    return total.quantize(MONEY_PLACES), book.currency


def _verdict(proof: Proof) -> tuple[str, str]:
    if proof.failures:
        state = ProofState.FAILED
        detail = (
            f"{len(proof.failures)} of {proof.confirmed + len(proof.failures)} freed objects are still stored "
            f"({proof.unproven:,} bytes); the deletion is not done"
        )
    elif proof.unchecked:
        state = ProofState.UNCHECKED
        detail = "the store could not be listed: " + "; ".join(proof.unchecked)
    else:
        state = ProofState.CONFIRMED
        detail = f"{proof.confirmed} freed objects checked: gone, or in the trash"
    if proof.failures and proof.unchecked:
        detail += "; not listed: " + "; ".join(proof.unchecked)
    return state, detail[:2000]


def _record(job_id: int, proof: Proof) -> str:
    state, detail = _verdict(proof)
    money, currency = _price(proof)
    now = timezone.now()
    figures = {
        "proof_state": state,
        "proof_detail": detail,
        "proof_failures": proof.failures[:MAX_FAILURES],
        "bytes_reclaimed": proof.reclaimed,
        "bytes_in_trash": proof.in_trash,
        "bytes_unproven": proof.unproven,
        "money_reclaimed": money,
        "money_currency": currency,
    }
    with transaction.atomic():
        job = DeletionJob.objects.select_for_update(of=("self",)).filter(pk=job_id).first()
        if job is None:
            return ""
        before = {
            "proof_state": job.proof_state,
            "bytes_reclaimed": job.bytes_reclaimed,
            "bytes_in_trash": job.bytes_in_trash,
            "bytes_unproven": job.bytes_unproven,
            "failures": len(job.proof_failures),
        }
        after = {
            "proof_state": state,
            "bytes_reclaimed": proof.reclaimed,
            "bytes_in_trash": proof.in_trash,
            "bytes_unproven": proof.unproven,
            "failures": len(proof.failures[:MAX_FAILURES]),
        }
        DeletionJob.objects.filter(pk=job_id).update(proof_at=now, **figures)
        if before != after:
            audit_job_event(
                job,
                WORKER,
                "deletion.proof",
                reason=detail,
                before={"deletion": job.pk, **before},
                after={
                    "deletion": job.pk,
                    **after,
                    "money_reclaimed": str(money) if money is not None else None,
                    "currency": currency,
                    "not_gone": proof.failures[:20],
                },
            )
    if state == ProofState.FAILED:
        log.warning("deletion %s: proof of reclaim failed: %s", job_id, detail)
    return state
