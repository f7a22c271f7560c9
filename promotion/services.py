"""Promotions as operator actions: plan one, request it, cancel it. Each writes one audit event.

``promote`` locks the checkpoint and the source copy, checks every precondition (the promises
included: a held checkpoint is never overwritten, nothing moves to a colder class), freezes the
list of files and queues the work once the transaction commits. The work itself is in
``promotion.runner``; its outcomes are recorded by ``job_finish`` here, one event per job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import cast

from django.db import transaction
from django.db.models import Count, Sum
from django.utils import timezone

from access.roles import Role, require_role
from actions.protection import is_held
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.choices import CopyState, Verification
from catalog.models import Checkpoint, CheckpointCopy, ShardFile
from catalog.recovery import unreachable_reason
from catalog.templatetags.fleet_format import bytes_iec
from ckptfleet.celery import task
from ckptfleet.errors import DomainError
from ckptfleet.rules import is_storage_class
from fleet.choices import LocationKind, Tier
from fleet.early_deletion import min_storage_days
from fleet.models import Bucket, StorageLocation
from fleet.pricebook import GIB, PriceBook, book_currency, utc_today
from fleet.s3 import RESTORE_CLASSES
from promotion.choices import OPEN_STATES, ItemState, JobState, Method, RestoreTier
from promotion.models import PromotionItem, PromotionJob

TIER_ORDER: tuple[str, ...] = tuple(Tier.values)  # hottest first
MAX_RESTORE_DAYS = 365
ITEM_BATCH = 1000
HOST_KINDS = (LocationKind.NVME, LocationKind.PFS)


def tier_rank(tier: str) -> int:
    """0 for the hottest tier; unknown tiers rank coldest, so nothing is ever judged hotter by mistake."""
    return TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER)


def tier_label(tier: str) -> str:
    return Tier(tier).label if tier in Tier.values else tier


@dataclass
class SourceGroup:
    """The files of the source copy in one storage class and tier."""

    storage_class: str
    tier: str
    files: int
    bytes: int
    cost_per_month: Decimal | None = None

    @property
    def archived(self) -> bool:
        return self.storage_class.upper() in RESTORE_CLASSES

    @property
    def tier_label(self) -> str:
        return tier_label(self.tier)


@dataclass
class Plan:
    """What a promotion will do, shown before it is asked for: files, bytes, tiers, money per month."""

    checkpoint: Checkpoint
    source_copy: CheckpointCopy
    target_location: StorageLocation
    target_storage_class: str
    target_tier: str
    method: str
    in_place: bool
    restore_days: int
    restore_tier: str
    files: int
    bytes: int
    groups: list[SourceGroup]
    archived_files: int = 0
    archived_bytes: int = 0
    copy_after_restore: bool = True
    cost_per_month: Decimal | None = None
    source_cost_per_month: Decimal | None = None
    currency: str = "USD"
    steps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def target_tier_label(self) -> str:
        return tier_label(self.target_tier)

    @property
    def method_label(self) -> str:
        return Method(self.method).label

    def as_dict(self) -> dict:
        return {
            "checkpoint": self.checkpoint.pk,
            "source_copy": self.source_copy.pk,
            "source_location": self.source_copy.location.name,
            "target_location": self.target_location.pk,
            "target_location_name": self.target_location.name,
            "target_storage_class": self.target_storage_class,
            "target_tier": self.target_tier,
            "method": self.method,
            "in_place": self.in_place,
            "files": self.files,
            "bytes": self.bytes,
            "archived_files": self.archived_files,
            "archived_bytes": self.archived_bytes,
            "restore_days": self.restore_days,
            "restore_tier": self.restore_tier,
            "cost_per_month": _cents(self.cost_per_month),
            "source_cost_per_month": _cents(self.source_cost_per_month),
            "currency": self.currency,
            "steps": self.steps,
            "notes": self.notes,
        }


def _cents(value: Decimal | None) -> str | None:
    return None if value is None else str(value.quantize(Decimal("0.01")))


# --- choosing and checking ------------------------------------------------------------------------


def best_source(checkpoint: Checkpoint, target_location: StorageLocation | None = None) -> CheckpointCopy:
    """The copy a promotion should read: present and complete, verified first, then the hottest location."""
    copies = list(
        CheckpointCopy.objects.filter(checkpoint=checkpoint, gone_at__isnull=True, state=CopyState.COMPLETE)
        .select_related("location", "location__bucket")
        .order_by("pk")
    )
    if not copies:
        raise DomainError(f"{checkpoint} has no complete copy to promote", code="no_source")
    elsewhere = [c for c in copies if target_location is None or c.location_id != target_location.pk]

    def key(copy: CheckpointCopy):
        return (copy.verification != Verification.VERIFIED, tier_rank(copy.location.tier), copy.pk)

    return min(elsewhere or copies, key=key)


def _bucket_of(location: StorageLocation) -> Bucket | None:
    try:
        return location.bucket
    except Bucket.DoesNotExist:
        return None


def _clean_class(value: str) -> str:
    value = (value or "").strip().upper()
    if value and not is_storage_class(value):
        raise DomainError(f"{value!r} is not a storage class (e.g. STANDARD, STANDARD_IA)", code="bad_storage_class")
    return value


def _source_groups(copy: CheckpointCopy, bucket: Bucket | None) -> list[SourceGroup]:
    rows = (
        ShardFile.objects.filter(copy=copy, gone_at__isnull=True)
        .values("storage_class", "tier")
        .annotate(files=Count("id"), bytes=Sum("size"))
        .order_by("storage_class", "tier")
    )
    groups = []
    for row in rows:
        sc = (row["storage_class"] or "").upper()
        tier = row["tier"] or (bucket.tier_of(sc) if bucket else copy.location.tier)
        groups.append(SourceGroup(storage_class=sc, tier=tier, files=row["files"], bytes=int(row["bytes"] or 0)))
    return groups


def promotion_plan(
    *,
    copy: CheckpointCopy,
    target_location: StorageLocation,
    target_storage_class: str = "",
    restore_days: int = 7,
    restore_tier: str = RestoreTier.STANDARD,
) -> Plan:
    """Check a promotion and say what it will do; raises DomainError (changing nothing) when it may not run."""
    checkpoint = copy.checkpoint
    source = copy.location
    target_storage_class = _clean_class(target_storage_class)
    _check_request(copy, restore_days, restore_tier)
    source_bucket = _bucket_of(source)
    groups = _source_groups(copy, source_bucket)
    files = sum(g.files for g in groups)
    if not files:
        raise DomainError(f"the copy at {source.name} has no files on record to promote", code="no_files")
    archived = [g for g in groups if g.archived]
    in_place = target_location.pk == source.pk
    if target_location.kind in HOST_KINDS:
        route = _to_host(copy, target_location, target_storage_class, source_bucket, archived, files)
    else:
        route = _to_bucket(
            copy,
            target_location,
            target_storage_class,
            source_bucket,
            groups,
            archived,
            files,
            in_place,
            restore_days=restore_days,
            restore_tier=restore_tier,
        )
    if route.copy_after_restore:
        _refuse_demotion(groups, route.target_tier)
    held = is_held(checkpoint)
    notes = _refuse_overwrites(copy, target_location, held=held, in_place=in_place, rewrites=route.copy_after_restore)
    notes += _plan_notes(copy, groups, source_bucket, held=held, in_place=in_place, route=route, days=restore_days)
    if route.method == Method.AGENT_PULL and target_location.host is not None:
        # The pull is the target host's agent's work: said plainly when that host cannot do it now.
        if why := unreachable_reason(target_location, timezone.now()):
            notes.insert(
                0,
                f"Host down: only {target_location.host.name}'s agent can pull these files, and {why}. The promotion "
                "waits, and nothing is copied, until the host reports again.",
            )
    plan = Plan(
        checkpoint=checkpoint,
        source_copy=copy,
        target_location=target_location,
        target_storage_class=route.storage_class if route.copy_after_restore else "",
        target_tier=route.target_tier,
        method=route.method,
        in_place=in_place,
        restore_days=restore_days,
        restore_tier=restore_tier,
        files=files,
        bytes=sum(g.bytes for g in groups),
        groups=groups,
        archived_files=sum(g.files for g in archived),
        archived_bytes=sum(g.bytes for g in archived),
        copy_after_restore=route.copy_after_restore,
        steps=route.steps,
        notes=notes,
    )
    _price(plan)
    return plan


@dataclass
class _Route:
    """How a promotion reaches its target: the method, the target's tier and storage class, whether objects are
    copied after any restore (False: a temporary restore in place), and the steps it will take, in words."""

    method: str
    target_tier: str
    storage_class: str = ""
    copy_after_restore: bool = True
    steps: list[str] = field(default_factory=list)


def _check_request(copy: CheckpointCopy, restore_days: int, restore_tier: str) -> None:
    """The request itself: restore days and tier in range, a present and complete source copy."""
    source = copy.location
    if not isinstance(restore_days, int) or not 1 <= restore_days <= MAX_RESTORE_DAYS:
        raise DomainError(f"keep a restored copy for 1 to {MAX_RESTORE_DAYS} days", code="bad_restore_days")
    if restore_tier not in RestoreTier.values:
        raise DomainError(f"the retrieval tier is one of {', '.join(RestoreTier.values)}", code="bad_restore_tier")
    if copy.gone_at is not None:
        raise DomainError(f"the copy at {source.name} has gone; promote a present copy", code="copy_gone")
    if copy.state != CopyState.COMPLETE:
        raise DomainError(
            f"the copy at {source.name} is {copy.get_state_display().lower()}: only a complete copy is promoted",
            code="copy_not_complete",
        )


def _to_host(
    copy: CheckpointCopy,
    target_location: StorageLocation,
    target_storage_class: str,
    source_bucket: Bucket | None,
    archived: list[SourceGroup],
    files: int,
) -> _Route:
    """A host's agent pulls the files from the source bucket, which must be readable now."""
    if target_storage_class:
        raise DomainError("a host location has no storage classes; leave the storage class empty")
    if source_bucket is None:
        raise DomainError(
            "a host's agent pulls from a bucket; copying between hosts is not something promotion does",
            code="unsupported",
        )
    if archived:
        raise DomainError(
            f"{sum(g.files for g in archived)} file(s) of this copy are in an archive class: restore them "
            "first (promote the copy in place), then ask the host to pull",
            code="archived_source",
        )
    host = target_location.host.name if target_location.host else target_location.name
    return _Route(
        Method.AGENT_PULL,
        target_location.tier,
        steps=[f"Ask the agent of {host} to pull {files} file(s) into {target_location.root_path}/{copy.path}."],
    )


def _to_bucket(
    copy: CheckpointCopy,
    target_location: StorageLocation,
    target_storage_class: str,
    source_bucket: Bucket | None,
    groups: list[SourceGroup],
    archived: list[SourceGroup],
    files: int,
    in_place: bool,
    *,
    restore_days: int,
    restore_tier: str,
) -> _Route:
    """A server-side copy between buckets of one endpoint, after restoring archived objects; or, in place with no
    storage class named, a temporary restore only."""
    target_bucket = _bucket_of(target_location)
    if target_bucket is None:
        raise DomainError(f"{target_location.name} is neither a bucket nor a host location", code="unsupported")
    if source_bucket is None:
        raise DomainError(
            "uploading a copy from a host into a bucket is the host's job, not a promotion; pick a bucket copy",
            code="unsupported",
        )
    if source_bucket.endpoint_url != target_bucket.endpoint_url:
        raise DomainError(
            "a server-side copy needs both buckets on the same endpoint "
            f"({source_bucket.endpoint_url or 'AWS'} and {target_bucket.endpoint_url or 'AWS'})",
            code="unsupported",
        )
    if target_storage_class in RESTORE_CLASSES:
        raise DomainError(f"{target_storage_class} is an archive class: promotion only moves data to a hotter one")
    copy_after_restore = True
    if in_place and not target_storage_class:
        if not archived:
            raise DomainError(
                "nothing to do: the copy is readable where it is; name a hotter storage class or another location",
                code="nothing_to_do",
            )
        copy_after_restore = False  # a temporary restored copy, readable for restore_days
    if not in_place and not target_storage_class:
        target_storage_class = "STANDARD"
    if copy_after_restore:
        target_tier = target_bucket.tier_of(target_storage_class)
    else:
        target_tier = min((g.tier for g in archived), key=tier_rank)
    if in_place and copy_after_restore and all(g.storage_class == target_storage_class for g in groups):
        raise DomainError(f"nothing to do: every file is in {target_storage_class} already", code="nothing_to_do")
    route = _Route(Method.RESTORE if archived else Method.COPY, target_tier, target_storage_class, copy_after_restore)
    if archived:
        route.steps.append(
            f"Restore {sum(g.files for g in archived)} archived object(s) ({_gib(sum(g.bytes for g in archived))}) "
            f"with the {restore_tier} retrieval tier, readable for {restore_days} day(s); "
            "the job waits, polling each object's restore status, until every one is available."
        )
    if copy_after_restore:
        where = "in place (the same keys)" if in_place else f"into {target_location.name}"
        route.steps.append(f"Copy {files} object(s) server-side {where} as {target_storage_class}.")
    return route


def _refuse_demotion(groups: list[SourceGroup], target_tier: str) -> None:
    """Promotion never moves data to a colder class."""
    demoting = [g for g in groups if tier_rank(g.tier) < tier_rank(target_tier)]
    if demoting:
        worst = demoting[0]
        raise DomainError(
            f"{sum(g.files for g in demoting)} file(s) are on {tier_label(worst.tier)}, hotter than "
            f"{tier_label(target_tier)}: promotion never moves data to a colder class",
            code="would_demote",
        )


def _refuse_overwrites(
    copy: CheckpointCopy, target_location: StorageLocation, *, held: bool, in_place: bool, rewrites: bool
) -> list[str]:
    """Promise 1: a held checkpoint's objects are never rewritten, in place or at the target. Returns the note on
    files already at the target."""
    checkpoint = copy.checkpoint
    if held and in_place and rewrites:
        raise DomainError(
            f"{checkpoint} is on hold: rewriting its objects in place would overwrite them; copy it to another "
            "location or restore it temporarily instead",
            code="held",
            http_status=409,
        )
    if in_place:
        return []
    there = (
        CheckpointCopy.objects.filter(location=target_location, path=copy.path, gone_at__isnull=True)
        .select_related("checkpoint")
        .first()
    )
    if there is None:
        return []
    if there.checkpoint_id != checkpoint.pk and is_held(there.checkpoint):
        raise DomainError(
            f"{target_location.name} holds {there.checkpoint} at {copy.path}, which is on hold: it is never "
            "overwritten",
            code="held",
            http_status=409,
        )
    return [
        f"{target_location.name} already has files at {copy.path}: identical objects are kept as they are, "
        "differing ones are never overwritten (those files fail the job instead)."
    ]


def _plan_notes(
    copy: CheckpointCopy,
    groups: list[SourceGroup],
    source_bucket: Bucket | None,
    *,
    held: bool,
    in_place: bool,
    route: _Route,
    days: int,
) -> list[str]:
    """What the person approving should know: early-deletion charges and versions of an in-place rewrite, a
    hold, and a temporary restore's end and cost."""
    notes: list[str] = []
    if in_place and route.copy_after_restore:
        notes.extend(_early_deletion_notes(copy, groups))
        if source_bucket is not None and source_bucket.versioning == "Enabled":
            notes.append(
                "The bucket keeps versions: each rewrite adds a new current version and the old one stays, "
                "billed in its class, until a deletion removes it."
            )
    if held:
        notes.append("This checkpoint is on hold: promotion only adds copies; nothing of it is overwritten.")
    if not route.copy_after_restore:
        notes.append(
            f"A restored copy is temporary: after {days} day(s) the objects are archived-only again. "
            "While restored, S3 bills the restored bytes at the STANDARD rate on top of the archive rate."
        )
    return notes


def _early_deletion_notes(copy: CheckpointCopy, groups: list[SourceGroup]) -> list[str]:
    """A rewrite in place ends the old object early: S3 bills the rest of its class's minimum storage duration."""
    notes = []
    now = timezone.now()
    for group in groups:
        days = min_storage_days().get(group.storage_class)
        if not days:
            continue
        young = ShardFile.objects.filter(
            copy=copy, gone_at__isnull=True, storage_class=group.storage_class, mtime__gt=now - timedelta(days=days)
        ).aggregate(n=Count("id"), size=Sum("size"))
        if young["n"]:
            notes.append(
                f"{young['n']} object(s) ({_gib(young['size'] or 0)}) in {group.storage_class} are younger than its "
                f"{days}-day minimum storage duration: rewriting them in place is billed as an early deletion "
                "(the remaining days at the old class's price)."
            )
    return notes


def _gib(n: int) -> str:

    return bytes_iec(n)


def _price(plan: Plan) -> None:
    """Money per month at the target (and what the source costs now) from the price book, for today."""
    book = PriceBook.load(until=utc_today())
    today = utc_today()
    plan.currency = book.currency if book.points else book_currency()
    source_total: Decimal | None = Decimal(0)
    for group in plan.groups:
        price = book.price(plan.source_copy.location, group.tier, group.storage_class, today)
        cost = None if price is None else price * group.bytes / GIB
        group.cost_per_month = cost
        source_total = None if source_total is None or cost is None else source_total + cost
    plan.source_cost_per_month = source_total
    if plan.copy_after_restore:
        price = book.price(plan.target_location, plan.target_tier, plan.target_storage_class, today)
        plan.cost_per_month = None if price is None else price * plan.bytes / GIB
    else:
        price = book.price(plan.target_location, Tier.OBJECT_STANDARD, "STANDARD", today)
        plan.cost_per_month = None if price is None else price * plan.archived_bytes / GIB
    if plan.cost_per_month is None:
        plan.notes.append("The price book has no price for the target tier: the cost per month is unknown.")


# --- actions --------------------------------------------------------------------------------------


def _require_operator(actor: Actor, doing: str, *, target_id: int | None, target_label: str) -> None:
    """People need the operator role (a refusal is audited by ``require_role``); commands and workers
    act on an operator's behalf already."""
    if actor.kind != ActorKind.USER:
        return
    require_role(
        actor.user,
        Role.OPERATOR,
        doing=doing,
        target_type="checkpoint",
        target_id=target_id,
        target_label=target_label,
        source=actor.source,
    )


def promote(
    *,
    actor: Actor,
    reason: str,
    target_location: StorageLocation,
    checkpoint: Checkpoint | None = None,
    copy: CheckpointCopy | None = None,
    target_storage_class: str = "",
    restore_days: int = 7,
    restore_tier: str = RestoreTier.STANDARD,
    request_id: str = "",
) -> PromotionJob:
    """Request the promotion of a checkpoint (its best copy) or of one copy to ``target_location``.

    Locks the checkpoint and the copy, checks (``promotion_plan``), freezes the file list, writes one
    ``promotion.request`` event, and queues the work once the transaction commits.
    """

    if copy is None and checkpoint is None:
        raise DomainError("name a checkpoint or one of its copies to promote", code="no_source")
    if copy is not None and checkpoint is not None and copy.checkpoint_id != checkpoint.pk:
        raise DomainError(f"that copy belongs to another checkpoint than {checkpoint}", code="bad_source")
    ckpt_id = checkpoint.pk if checkpoint is not None else cast(CheckpointCopy, copy).checkpoint_id  # one given
    _require_operator(actor, "promoting a checkpoint", target_id=ckpt_id, target_label=str(checkpoint or copy))
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("say why: a promotion needs a reason", code="reason_required")
    with transaction.atomic():
        checkpoint = (
            Checkpoint.objects.select_for_update(of=("self",), no_key=True).select_related("run__team").get(pk=ckpt_id)
        )
        if copy is None:
            copy = best_source(checkpoint, target_location)
        copy = (
            CheckpointCopy.objects.select_for_update(of=("self",))
            .select_related("location", "location__host")
            .get(pk=copy.pk)
        )
        copy.checkpoint = checkpoint
        target_location = StorageLocation.objects.select_related("host").get(pk=target_location.pk)
        plan = promotion_plan(
            copy=copy,
            target_location=target_location,
            target_storage_class=target_storage_class,
            restore_days=restore_days,
            restore_tier=restore_tier,
        )
        open_job = PromotionJob.objects.filter(
            source_copy=copy,
            target_location=target_location,
            target_storage_class=plan.target_storage_class,
            state__in=OPEN_STATES,
        ).first()
        if open_job is not None:
            raise DomainError(
                f"promotion #{open_job.pk} of this copy to {target_location.name} is already "
                f"{open_job.get_state_display().lower()}; follow it or cancel it",
                code="promotion_open",
                http_status=409,
            )
        now = timezone.now()
        agent = plan.method == Method.AGENT_PULL
        job = PromotionJob.objects.create(
            checkpoint=checkpoint,
            source_copy=copy,
            target_location=target_location,
            target_storage_class=plan.target_storage_class,
            target_tier=plan.target_tier,
            method=plan.method,
            state=JobState.AWAITING_AGENT if agent else JobState.REQUESTED,
            in_place=plan.in_place,
            restore_days=restore_days,
            restore_tier=restore_tier,
            reason=reason,
            requested_by=actor.user,
            requested_label=actor.label,
            requested_at=now,
            items_total=plan.files,
            bytes_total=plan.bytes,
        )
        _freeze_items(job, copy, target_location)
        audit(
            actor,
            "promotion.request",
            target_type="checkpoint",
            target_id=checkpoint.pk,
            target_label=str(checkpoint),
            reason=reason,
            before={"copy": copy.pk, "location": copy.location.name, "tiers": sorted({g.tier for g in plan.groups})},
            after={"promotion": job.pk, **plan.as_dict()},
            request_id=request_id,
        )
        if not agent:
            transaction.on_commit(lambda: task("promotion.tasks.promotion_start").delay(job.pk))
    return job


def _freeze_items(job: PromotionJob, copy: CheckpointCopy, target: StorageLocation) -> None:
    """One item per present file of the copy: the exact source key, version, ETag and size, and where it goes."""
    source_bucket = _bucket_of(copy.location)
    target_bucket = _bucket_of(target)
    source_prefix = source_bucket.prefix if source_bucket else ""
    if target_bucket is not None:
        target_prefix = target_bucket.prefix
    else:
        target_prefix = target.root_path.rstrip("/") + "/"
    rows = (
        ShardFile.objects.filter(copy=copy, gone_at__isnull=True)
        .order_by("path")
        .values_list("pk", "path", "size", "etag", "version_id", "storage_class")
    )
    batch = []
    for pk, path, size, etag, version_id, storage_class in rows.iterator(chunk_size=ITEM_BATCH):
        archived = (storage_class or "").upper() in RESTORE_CLASSES
        batch.append(
            PromotionItem(
                job=job,
                shard_file_id=pk,
                path=path,
                source_key=source_prefix + path,
                target_key=target_prefix + path,
                size=size,
                etag=etag,
                version_id=version_id,
                source_storage_class=storage_class,
                state=ItemState.PENDING if archived else ItemState.READY,
            )
        )
        if len(batch) >= ITEM_BATCH:
            PromotionItem.objects.bulk_create(batch)
            batch = []
    if batch:
        PromotionItem.objects.bulk_create(batch)


def cancel(*, job: PromotionJob, actor: Actor, reason: str = "", request_id: str = "") -> PromotionJob:
    """Stop an open promotion. What was restored or copied already stays (removing data is a deletion's job)."""
    _require_operator(actor, "cancelling a promotion", target_id=job.checkpoint_id, target_label=str(job))
    with transaction.atomic():
        job = (
            PromotionJob.objects.select_for_update(of=("self",)).select_related("checkpoint__run__team").get(pk=job.pk)
        )
        if job.state not in OPEN_STATES:
            raise DomainError(
                f"promotion #{job.pk} is {job.get_state_display().lower()} already; only an open one can be cancelled",
                code="not_open",
                http_status=409,
            )
        before = {"state": job.state, "bytes_done": job.bytes_done, "items_done": job.items_done}
        job.state = JobState.CANCELLED
        job.finished_at = timezone.now()
        job.cancelled_label = actor.label
        job.claimed_by = ""
        job.save(update_fields=["state", "finished_at", "cancelled_label", "claimed_by"])
        audit(
            actor,
            "promotion.cancel",
            target_type="checkpoint",
            target_id=job.checkpoint_id,
            target_label=str(job.checkpoint),
            reason=(reason or "").strip(),
            before=before,
            after={"promotion": job.pk, "state": job.state},
            request_id=request_id,
        )
    return job


# --- outcomes of the work, recorded by the worker ---------------------------------------------------

WORKER = Actor.worker("promotion worker")


def job_transition(
    job_id: int,
    *,
    frm: tuple[str, ...],
    to: str,
    action: str = "",
    after: dict | None = None,
    error: str = "",
    actor: Actor = WORKER,
) -> bool:
    """Move a job from one of ``frm`` to ``to`` if it is still there (compare-and-swap under a lock).

    With ``action`` the move writes that audit event in the same transaction: exactly one per outcome,
    even when two deliveries of a task race to finish the same job. ``actor`` is who reported the
    outcome: the worker, or the host whose agent pulled the files.
    """
    with transaction.atomic():
        job = (
            PromotionJob.objects.select_for_update(of=("self",)).select_related("checkpoint__run__team").get(pk=job_id)
        )
        if job.state not in frm:
            return False
        before = {"state": job.state, "bytes_done": job.bytes_done, "items_done": job.items_done}
        now = timezone.now()
        job.state = to
        fields = ["state"]
        if to in (JobState.COMPLETED, JobState.FAILED):
            job.finished_at = now
            job.claimed_by = ""
            fields += ["finished_at", "claimed_by"]
        if job.started_at is None:
            job.started_at = now
            fields.append("started_at")
        if to == JobState.VERIFYING:  # a move's verification is bounded from here (promotion.moves.verify)
            job.verifying_since = now
            fields.append("verifying_since")
        if error:
            job.error = error[:4000]
            fields.append("error")
        job.save(update_fields=fields)
        if action:
            audit(
                actor,
                action,
                target_type="checkpoint",
                target_id=job.checkpoint_id,
                target_label=str(job.checkpoint),
                reason=error,
                before=before,
                after={"promotion": job.pk, "state": to, **(after or {})},
            )
    return True
