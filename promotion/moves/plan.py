"""The plan of a move: what it would do per checkpoint and in total, and what it leaves out and why.

Prices: the price book (``fleet.pricebook``) per GiB-month. Request prices and the archive per-object
overhead are AWS S3's list prices, us-east-1 (https://aws.amazon.com/s3/pricing/, "Requests & data
retrievals"; S3 User Guide, "Storage classes for archiving objects": GLACIER and DEEP_ARCHIVE add 32 KiB
billed at the archive class's price and 8 KiB at STANDARD's per object). The request table mirrors
``fleet.early_deletion.REQUEST_PRICE_PER_1000`` (overridable by the same setting); retention sits above
promotion, so it cannot be imported from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db.models import Count, Sum
from django.utils import timezone

from actions.leases import describe as describe_lease
from actions.leases import live as live_leases
from actions.models import DeletionJob
from actions.protection import OPEN_DELETION_STATES, active_holds
from catalog.choices import CopyState, Verification
from catalog.early_deletion import early_deletion_by_copy
from catalog.models import Checkpoint, CheckpointCopy, ShardFile
from catalog.recovery import ARCHIVE_TIERS, restorable_copies, restorable_key, unreachable_reason
from ckptfleet.errors import DomainError
from fleet import s3
from fleet.choices import Tier
from fleet.early_deletion import request_prices
from fleet.models import Bucket, StorageLocation
from fleet.pricebook import GIB, PriceBook, book_currency, utc_today
from promotion.choices import OPEN_STATES, Direction, Method
from promotion.models import PromotionJob
from promotion.services import HOST_KINDS, tier_label, tier_rank

DAYS_PER_BILLING_MONTH = 30  # how AWS pro-rates a minimum storage duration
ARCHIVE_CLASSES = ("GLACIER", "DEEP_ARCHIVE")
ARCHIVE_OVERHEAD_AT_CLASS = 32 * 1024  # bytes per object billed at the archive class's price
ARCHIVE_OVERHEAD_AT_STANDARD = 8 * 1024  # bytes per object billed at STANDARD's price
MOVE_CLASSES = ("STANDARD", "STANDARD_IA", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE")
FREED_BY_DELETION = "two-phase deletion of the source copy after the new copy verifies"
FREED_IN_PLACE = "the class change replaces the object in place"
CENT = Decimal("0.01")


@dataclass
class MoveLine:
    """One checkpoint's move: its source copy, how it moves, what it costs and saves."""

    checkpoint: Checkpoint
    source_copy: CheckpointCopy
    method: str  # Method.COPY, Method.AGENT_PUSH; in_place says a class change
    in_place: bool
    direction: str
    files: int
    bytes: int
    source_tiers: list[str]
    source_cost_per_month: Decimal | None = None
    target_cost_per_month: Decimal | None = None
    early_deletion: Decimal = Decimal(0)
    requests: Decimal = Decimal(0)
    archive_overhead_per_month: Decimal = Decimal(0)
    young_files: int = 0
    waits_for: str = ""  # why the work cannot start now: its source host's agent is down or silent

    @property
    def saving_per_month(self) -> Decimal | None:
        if self.source_cost_per_month is None or self.target_cost_per_month is None:
            return None
        return self.source_cost_per_month - self.target_cost_per_month

    @property
    def one_off(self) -> Decimal:
        return self.early_deletion + self.requests

    @property
    def payback_days(self) -> int | None:
        return payback_days(self.one_off, self.saving_per_month)

    @property
    def method_label(self) -> str:
        if self.in_place:
            return "Storage-class change in place (CopyObject onto the same key)"
        if self.method == Method.AGENT_PUSH:
            return Method.AGENT_PUSH.label
        return "Server-side copy (CopyObject, or UploadPartCopy above the multipart threshold)"

    @property
    def freeing(self) -> str:
        return FREED_IN_PLACE if self.in_place else FREED_BY_DELETION

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint.pk,
            "checkpoint_label": str(self.checkpoint),
            # When it was saved and from what (catalog.ages); null: unknown, its age counts from first_seen_at.
            "saved_at": self.checkpoint.saved_at.isoformat() if self.checkpoint.saved_at else None,
            "saved_source": self.checkpoint.saved_source or None,
            "first_seen_at": self.checkpoint.first_seen_at.isoformat(),
            "source_copy": self.source_copy.pk,
            "source_location": self.source_copy.location.name,
            "direction": self.direction,
            "method": "class_change" if self.in_place else self.method,
            "method_label": self.method_label,
            "in_place": self.in_place,
            "freeing": self.freeing,
            "files": self.files,
            "bytes": self.bytes,
            "source_tiers": self.source_tiers,
            "source_cost_per_month": cents(self.source_cost_per_month),
            "target_cost_per_month": cents(self.target_cost_per_month),
            "saving_per_month": cents(self.saving_per_month),
            "early_deletion": cents(self.early_deletion),
            "requests": cents(self.requests),
            "archive_overhead_per_month": cents(self.archive_overhead_per_month),
            "one_off": cents(self.one_off),
            "payback_days": self.payback_days,
            "waits_for": self.waits_for or None,
        }


@dataclass
class Excluded:
    """A checkpoint the move leaves out, and why, in words a person can act on."""

    checkpoint: Checkpoint
    code: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "checkpoint": self.checkpoint.pk,
            "label": str(self.checkpoint),
            "code": self.code,
            "reason": self.reason,
        }


@dataclass
class MovePlan:
    """What a move of some checkpoints to one location and class would do, shown before it is asked for."""

    target_location: StorageLocation
    target_storage_class: str
    target_tier: str
    lines: list[MoveLine] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)
    stays_hot: dict[int, Checkpoint | None] = field(default_factory=dict)  # run id -> newest restorable, readable
    run_labels: dict[int, str] = field(default_factory=dict)
    currency: str = "USD"
    notes: list[str] = field(default_factory=list)

    @property
    def target_tier_label(self) -> str:
        return tier_label(self.target_tier)

    @property
    def files(self) -> int:
        return sum(line.files for line in self.lines)

    @property
    def bytes(self) -> int:
        return sum(line.bytes for line in self.lines)

    def _total(self, name: str) -> Decimal | None:
        values = [getattr(line, name) for line in self.lines]
        if any(v is None for v in values):
            return None
        return sum(values, Decimal(0))

    @property
    def saving_per_month(self) -> Decimal | None:
        return self._total("saving_per_month")

    @property
    def early_deletion(self) -> Decimal:
        return sum((line.early_deletion for line in self.lines), Decimal(0))

    @property
    def requests(self) -> Decimal:
        return sum((line.requests for line in self.lines), Decimal(0))

    @property
    def archive_overhead_per_month(self) -> Decimal:
        return sum((line.archive_overhead_per_month for line in self.lines), Decimal(0))

    @property
    def one_off(self) -> Decimal:
        return self.early_deletion + self.requests

    @property
    def payback_days(self) -> int | None:
        return payback_days(self.one_off, self.saving_per_month)

    @property
    def approval_note(self) -> str:
        return (
            "Freeing a source copy is a deletion: it is scheduled through the deletion service once the new copy "
            "verifies, so deletion's rules apply to it (holds and pins, the grace period, a second person's "
            "approval above the size threshold or for milestone and critical checkpoints, the blast-radius limits)."
        )

    @property
    def host_down_note(self) -> str:
        """What the preview must say plainly when work in it needs the agent of a host that is down or silent."""
        waiting = [line for line in self.lines if line.waits_for]
        if not waiting:
            return ""
        return (
            f"{len(waiting)} of these {len(self.lines)} checkpoints wait for a host that is down or silent: "
            + "; ".join(sorted({line.waits_for for line in waiting}))
            + ". Nothing of them is uploaded, and their source copies stay, until the host reports again."
        )

    def stays_hot_rows(self) -> list[dict[str, Any]]:
        return [
            {"run": run_id, "run_label": self.run_labels.get(run_id, ""), "checkpoint": c}
            for run_id, c in sorted(self.stays_hot.items())
        ]

    def as_dict(self) -> dict[str, Any]:
        return {
            "target_location": self.target_location.pk,
            "target_location_name": self.target_location.name,
            "target_storage_class": self.target_storage_class,
            "target_tier": self.target_tier,
            "currency": self.currency,
            "files": self.files,
            "bytes": self.bytes,
            "saving_per_month": cents(self.saving_per_month),
            "early_deletion": cents(self.early_deletion),
            "requests": cents(self.requests),
            "archive_overhead_per_month": cents(self.archive_overhead_per_month),
            "one_off": cents(self.one_off),
            "payback_days": self.payback_days,
            "approval": self.approval_note,
            "host_down": self.host_down_note or None,
            "checkpoints": [line.as_dict() for line in self.lines],
            "excluded": [e.as_dict() for e in self.excluded],
            "stays_hot": [
                {
                    "run": row["run"],
                    "run_label": row["run_label"],
                    "checkpoint": row["checkpoint"].pk if row["checkpoint"] else None,
                    "label": str(row["checkpoint"].label) if row["checkpoint"] else None,
                }
                for row in self.stays_hot_rows()
            ],
            "notes": self.notes,
        }


def cents(value: Decimal | None) -> str | None:
    return None if value is None else str(value.quantize(CENT, rounding=ROUND_HALF_UP))


def payback_days(one_off: Decimal, saving_per_month: Decimal | None) -> int | None:
    """Whole days until a monthly saving repays the one-off charges: 0 when there are none, None when never."""
    if not one_off:
        return 0
    if saving_per_month is None or saving_per_month <= 0:
        return None
    return math.ceil(one_off * DAYS_PER_BILLING_MONTH / saving_per_month)


def _target_class(target_location: StorageLocation, value: str) -> str:
    value = (value or "").strip().upper()
    if bucket_of(target_location) is None:
        raise DomainError(
            f"{target_location.name} is not a bucket: a move goes to object storage (a bucket location)",
            code="unsupported",
        )
    if not value:
        raise DomainError("name the storage class to move to (e.g. GLACIER_IR)", code="bad_storage_class")
    if value not in MOVE_CLASSES:
        raise DomainError(
            f"{value!r} is not a storage class a move goes to; one of {', '.join(MOVE_CLASSES)}",
            code="bad_storage_class",
        )
    return value


def move_plan(
    *,
    checkpoints,
    target_location: StorageLocation,
    target_storage_class: str = "",
    source_location: StorageLocation | None = None,
    origin: str = "manual",
) -> MovePlan:
    """Say what moving ``checkpoints`` (one, a run's, or a filtered set) to ``target_location`` in
    ``target_storage_class`` would do, per checkpoint and in total; raises DomainError only for a bad target.

    Every checkpoint that may not move is left out and named with the reason, never silently dropped.
    """
    target_storage_class = _target_class(target_location, target_storage_class)
    target_bucket = bucket_of(target_location)
    assert target_bucket is not None  # _target_class refused anything else
    target_tier = target_bucket.tier_of(target_storage_class)
    plan = MovePlan(target_location=target_location, target_storage_class=target_storage_class, target_tier=target_tier)
    checkpoints = list(
        Checkpoint.objects.filter(pk__in=[c.pk for c in checkpoints])
        .select_related("run__team")
        .order_by("run_id", "-step", "tag")
    )
    if not checkpoints:
        raise DomainError("no checkpoints to move: name at least one", code="nothing_to_move")
    book = PriceBook.load(until=utc_today())
    plan.currency = book.currency if book.points else book_currency()
    for checkpoint in checkpoints:
        plan.run_labels[checkpoint.run_id] = str(checkpoint.run)
        try:
            line = _line(checkpoint, target_location, target_bucket, target_storage_class, target_tier, source_location)
            _refuse_for_promises(checkpoint, line.source_copy, origin)
        except _Skip as skip:
            plan.excluded.append(Excluded(checkpoint, skip.code, skip.reason))
            continue
        _price_line(line, book, plan)
        plan.lines.append(line)
    _stays_hot(plan)
    if any(line.saving_per_month is None for line in plan.lines):
        plan.notes.append("The price book lacks a price for a source or the target: the saving is unknown.")
    if target_bucket.versioning == "Enabled" and any(line.in_place for line in plan.lines):
        plan.notes.append(
            f"{target_location.name} keeps versions: a class change in place adds a new current version and the "
            "old one stays, billed in its class, until a deletion removes it."
        )
    if target_storage_class in ARCHIVE_CLASSES:
        plan.notes.append(
            f"{target_storage_class} is an archive class: reading the moved checkpoints back needs a restore "
            "(minutes to hours) first."
        )
    plan.notes.append(
        "Early-deletion charges are an upper bound: an object's age is counted from its file time, and the "
        "source goes no sooner than the deletion's grace period."
    )
    return plan


class _Skip(Exception):
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def _choose_source(
    checkpoint: Checkpoint, target_location: StorageLocation, source_location: StorageLocation | None
) -> CheckpointCopy:
    present = list(
        CheckpointCopy.objects.filter(checkpoint=checkpoint, gone_at__isnull=True)
        .select_related("location", "location__host", "location__bucket")
        .order_by("pk")
    )
    if source_location is not None:
        present = [c for c in present if c.location_id == source_location.pk]
        if not present:
            raise _Skip("no_source", f"it has no present copy at {source_location.name}")
    if not present:
        raise _Skip("no_source", "it has no present copy")
    here = [c for c in present if c.location_id == target_location.pk]
    if here:
        return here[0]  # a class change in place of the copy already in the target bucket
    return min(present, key=lambda c: (c.state != CopyState.COMPLETE, tier_rank(c.location.tier), c.pk))


def _line(
    checkpoint: Checkpoint,
    target_location: StorageLocation,
    target_bucket: Bucket,
    target_class: str,
    target_tier: str,
    source_location: StorageLocation | None,
) -> MoveLine:
    copy = _choose_source(checkpoint, target_location, source_location)
    source = copy.location
    if copy.state != CopyState.COMPLETE:
        raise _Skip("copy_not_complete", f"its copy at {source.name} is {copy.get_state_display().lower()}")
    if copy.temporary:
        raise _Skip("copy_not_complete", f"its copy at {source.name} is a left-over of an interrupted save")
    if copy.verification in (Verification.DISPUTED, Verification.MISMATCH):
        raise _Skip(
            "disputed", f"its copy at {source.name} is {copy.get_verification_display().lower()}: settle it first"
        )
    source_bucket = bucket_of(source)
    in_place = source.pk == target_location.pk
    waits_for = ""
    if source.kind in HOST_KINDS:
        method, direction = Method.AGENT_PUSH, Direction.OFFLOAD
        # The upload is the host's agent's work: a host that is down or silent uploads nothing until it is back.
        if why := unreachable_reason(source, timezone.now()):
            waits_for = f"only {source.host.name}'s agent can upload these files, and {why}" if source.host else why
    elif source_bucket is None:
        raise _Skip("unsupported", f"{source.name} is neither a host location nor a bucket")
    else:
        method, direction = Method.COPY, Direction.DEMOTE
        if source_bucket.endpoint_url != target_bucket.endpoint_url:
            raise _Skip(
                "other_endpoint",
                f"{source.name} and {target_location.name} are on different endpoints "
                f"({source_bucket.endpoint_url or 'AWS'} and {target_bucket.endpoint_url or 'AWS'}): "
                "a server-side copy needs one",
            )
    rows = list(
        ShardFile.objects.filter(copy=copy, gone_at__isnull=True)
        .values("storage_class", "tier")
        .annotate(files=Count("id"), bytes=Sum("size"))
        .order_by("storage_class", "tier")
    )
    if not rows:
        raise _Skip("no_files", f"its copy at {source.name} has no files on record")
    tiers = sorted({r["tier"] or source.tier for r in rows}, key=tier_rank)
    classes = {(r["storage_class"] or "").upper() for r in rows}
    if any(tier_rank(t) > tier_rank(target_tier) for t in tiers):
        raise _Skip(
            "would_promote",
            f"its copy at {source.name} is on {tier_label(tiers[-1])}, colder than {tier_label(target_tier)}: "
            "moving it there is a promotion",
        )
    if classes & set(s3.RESTORE_CLASSES):
        raise _Skip("archived_source", f"files of its copy at {source.name} are archived: a move reads them directly")
    if in_place and classes == {target_class}:
        raise _Skip("nothing_to_do", f"every file at {source.name} is in {target_class} already")
    return MoveLine(
        checkpoint=checkpoint,
        source_copy=copy,
        method=method,
        in_place=in_place,
        direction=direction,
        files=sum(r["files"] for r in rows),
        bytes=sum(int(r["bytes"] or 0) for r in rows),
        source_tiers=tiers,
        waits_for=waits_for,
    )


def _refuse_for_promises(checkpoint: Checkpoint, copy: CheckpointCopy, origin: str) -> None:
    """Promise 1 (held), 11-like (an open deletion or promotion of it), 12 for policies."""
    holds = list(active_holds(checkpoint).only("case_ref"))
    if holds:
        cases = ", ".join(sorted({h.case_ref for h in holds}))
        raise _Skip("held", f"it is on hold (case {cases}): a held checkpoint is never demoted")
    lease = live_leases([checkpoint.pk]).order_by("-expires_at").first()
    if lease is not None:
        raise _Skip("leased", f"it is in use: {describe_lease(lease)}; it waits until the lease ends (promise 11)")
    deletion = DeletionJob.objects.filter(checkpoint=checkpoint, state__in=OPEN_DELETION_STATES).first()
    if deletion is not None:
        raise _Skip("deletion_open", f"deletion {deletion.pk} of it is open; cancel it or let it run first")
    job = PromotionJob.objects.filter(checkpoint=checkpoint, state__in=OPEN_STATES).first()
    if job is not None:
        raise _Skip(
            "promotion_open", f"{job.get_direction_display().lower()} #{job.pk} of it is open; follow it or cancel it"
        )
    if origin.startswith("policy") and copy.verification != Verification.VERIFIED:
        raise _Skip("unverified", "a policy moves only verified copies (fail closed)")


def _price_line(line: MoveLine, book: PriceBook, plan: MovePlan) -> None:
    """Monthly costs before and after, early deletion of young source objects, requests, archive overhead."""
    today = utc_today()
    source = line.source_copy.location
    groups = (
        ShardFile.objects.filter(copy=line.source_copy, gone_at__isnull=True)
        .values("storage_class", "tier")
        .annotate(files=Count("id"), bytes=Sum("size"))
    )
    total: Decimal | None = Decimal(0)
    for g in groups:
        price = book.price(source, g["tier"] or source.tier, (g["storage_class"] or "").upper(), today)
        total = None if total is None or price is None else total + price * int(g["bytes"] or 0) / GIB
    line.source_cost_per_month = total
    target = plan.target_location
    price = book.price(target, plan.target_tier, plan.target_storage_class, today)
    if price is not None and plan.target_storage_class in ARCHIVE_CLASSES:
        standard = book.price(target, Tier.OBJECT_STANDARD, "STANDARD", today) or Decimal(0)
        line.archive_overhead_per_month = (
            Decimal(line.files) * (price * ARCHIVE_OVERHEAD_AT_CLASS + standard * ARCHIVE_OVERHEAD_AT_STANDARD) / GIB
        )
    line.target_cost_per_month = None if price is None else price * line.bytes / GIB + line.archive_overhead_per_month
    requests = line.files + _extra_part_requests(line.source_copy)
    line.requests = Decimal(requests) * request_prices().get(plan.target_storage_class, Decimal(0)) / 1000
    _early_deletion(line, book)


def _extra_part_requests(copy: CheckpointCopy) -> int:
    """A multipart copy is CreateMultipartUpload, one UploadPartCopy per part and CompleteMultipartUpload."""
    threshold, part = settings.PROMOTION_MULTIPART_THRESHOLD, settings.PROMOTION_MULTIPART_PART_SIZE
    extra = 0
    for size in ShardFile.objects.filter(copy=copy, gone_at__isnull=True, size__gt=threshold).values_list(
        "size", flat=True
    ):
        extra += -(-size // part) + 1  # the parts and the completion, beyond the one request already counted
    return extra


def _early_deletion(line: MoveLine, book: PriceBook) -> None:
    """Objects leaving a class before its minimum storage duration are billed for the remaining days
    (``catalog.early_deletion``: the deletion preview's rule, ages in UTC calendar days)."""
    charge = early_deletion_by_copy([line.source_copy], book=book).get(line.source_copy.pk)
    if charge is not None:
        line.early_deletion = charge.charge
        line.young_files = charge.objects


def _stays_hot(plan: MovePlan) -> None:
    """Per run, the newest restorable checkpoint that stays readable without a restore after the move."""
    moving = {line.source_copy.pk for line in plan.lines}
    runs = sorted(plan.run_labels)
    best: dict[int, tuple] = {}
    rows = (
        CheckpointCopy.objects.filter(restorable_copies(), checkpoint__run_id__in=runs)
        .exclude(pk__in=moving)
        .exclude(location__tier__in=list(ARCHIVE_TIERS))
        .values_list("checkpoint__run_id", "checkpoint_id", "checkpoint__step", "checkpoint__tag", "verification")
    )
    candidates = list(rows)
    if plan.target_tier not in ARCHIVE_TIERS:
        candidates += [
            (
                line.checkpoint.run_id,
                line.checkpoint.pk,
                line.checkpoint.step,
                line.checkpoint.tag,
                Verification.VERIFIED,
            )
            for line in plan.lines
        ]
    for run_id, checkpoint_id, step, tag, verification in candidates:
        key = restorable_key(step, tag, verification)
        if run_id not in best or key > best[run_id][0]:
            best[run_id] = (key, checkpoint_id)
    found = Checkpoint.objects.in_bulk([c for _, c in best.values()])
    plan.stays_hot = {run_id: found.get(best[run_id][1]) if run_id in best else None for run_id in runs}


def bucket_of(location: StorageLocation) -> Bucket | None:
    try:
        return location.bucket
    except Bucket.DoesNotExist:
        return None
