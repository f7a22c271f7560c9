"""Asking for a move: one job per checkpoint that may move, frozen file by file, one audit event each."""

from __future__ import annotations

from functools import partial

from django.db import transaction
from django.utils import timezone

from access.roles import Role, require_role
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.models import Checkpoint, CheckpointCopy, ShardFile
from ckptfleet.celery import task
from ckptfleet.errors import DomainError
from fleet.models import StorageLocation
from promotion.choices import ItemState, JobState, Method
from promotion.models import PromotionItem, PromotionJob
from promotion.moves.plan import bucket_of, move_plan
from promotion.services import ITEM_BATCH


def _require_actor(actor: Actor, checkpoints: list[Checkpoint]) -> None:
    """A person needs the operator role (a refusal is audited by ``require_role``); a policy or a command acts
    as the system, as ``actions.services.schedule_deletion`` accepts."""
    if actor.kind != ActorKind.USER:
        return
    if actor.user is None:
        raise DomainError("a move by a person needs the signed-in user", code="not_authenticated")
    first = checkpoints[0] if checkpoints else None
    require_role(
        actor.user,
        Role.OPERATOR,
        doing="moving checkpoints to a colder tier",
        target_type="checkpoint",
        target_id=first.pk if first else None,
        target_label=str(first) if first else "",
        source=actor.source,
    )


def request_move(
    *,
    checkpoints,
    target_location: StorageLocation,
    target_storage_class: str,
    actor: Actor,
    reason: str,
    origin: str = "manual",
    source_location: StorageLocation | None = None,
    request_id: str = "",
) -> list[PromotionJob]:
    """Ask for the move of ``checkpoints``: one job per checkpoint that may move, all in one transaction, with
    one ``move.request`` event each carrying its plan's figures. The checkpoints the plan leaves out are named
    in each event; when none may move, nothing is written and the reasons are raised.
    """
    checkpoints = list(checkpoints)
    _require_actor(actor, checkpoints)
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("say why: a move needs a reason", code="reason_required")
    if len(reason) > 2000:
        raise DomainError("the reason is longer than 2000 characters")
    origin = (origin or "manual").strip()
    if origin != "manual" and not origin.startswith("policy:"):
        raise DomainError(f"origin {origin!r} is neither 'manual' nor 'policy:<id>'")
    jobs: list[PromotionJob] = []
    with transaction.atomic():
        locked = list(
            Checkpoint.objects.select_for_update(of=("self",), no_key=True)
            .filter(pk__in=[c.pk for c in checkpoints])
            .order_by("pk")
        )
        target_location = StorageLocation.objects.select_related("host").get(pk=target_location.pk)
        plan = move_plan(
            checkpoints=locked,
            target_location=target_location,
            target_storage_class=target_storage_class,
            source_location=source_location,
            origin=origin,
        )
        if not plan.lines:
            why = "; ".join(f"{e.checkpoint}: {e.reason}" for e in plan.excluded)
            raise DomainError(f"nothing may move: {why}", code="nothing_to_move")
        excluded = [e.as_dict() for e in plan.excluded]
        now = timezone.now()
        for line in plan.lines:
            copy = CheckpointCopy.objects.select_for_update(of=("self",)).get(pk=line.source_copy.pk)
            agent = line.method == Method.AGENT_PUSH
            job = PromotionJob.objects.create(
                checkpoint=line.checkpoint,
                source_copy=copy,
                target_location=target_location,
                target_storage_class=plan.target_storage_class,
                target_tier=plan.target_tier,
                direction=line.direction,
                origin=origin,
                method=line.method,
                state=JobState.AWAITING_AGENT if agent else JobState.REQUESTED,
                in_place=line.in_place,
                reason=reason,
                requested_by=actor.user,
                requested_label=actor.label,
                requested_at=now,
                items_total=line.files,
                bytes_total=line.bytes,
                plan={**line.as_dict(), "currency": plan.currency, "target_tier": plan.target_tier},
            )
            freeze_move_items(job, line.source_copy, target_location)
            audit(
                actor,
                "move.request",
                target_type="checkpoint",
                target_id=line.checkpoint.pk,
                target_label=str(line.checkpoint),
                reason=reason,
                before={"copy": copy.pk, "location": copy.location.name, "tiers": line.source_tiers},
                after={
                    "move": job.pk,
                    "target_location": target_location.name,
                    "target_storage_class": plan.target_storage_class,
                    "origin": origin,
                    **line.as_dict(),
                    "currency": plan.currency,
                    "excluded": excluded,
                },
                request_id=request_id,
            )
            if not agent:
                transaction.on_commit(partial(task("promotion.tasks.promotion_start").delay, job.pk))
            jobs.append(job)
    return jobs


def freeze_move_items(job: PromotionJob, copy: CheckpointCopy, target: StorageLocation) -> None:
    """One item per present file: the exact source key (for a host, the absolute path), version, ETag, size and
    the catalog's sha256 when it has one, and the full key it goes to in the target bucket."""
    source_bucket = bucket_of(copy.location)
    target_bucket = bucket_of(target)
    assert target_bucket is not None
    if source_bucket is not None:
        source_prefix = source_bucket.prefix
    else:
        source_prefix = copy.location.root_path.rstrip("/") + "/"
    rows = (
        ShardFile.objects.filter(copy=copy, gone_at__isnull=True)
        .order_by("path")
        .values_list("pk", "path", "size", "etag", "version_id", "storage_class", "checksum", "checksum_algo")
    )
    batch = []
    for pk, path, size, etag, version_id, storage_class, checksum, algo in rows.iterator(chunk_size=ITEM_BATCH):
        batch.append(
            PromotionItem(
                job=job,
                shard_file_id=pk,
                path=path,
                source_key=source_prefix + path,
                target_key=target_bucket.prefix + path,
                size=size,
                etag=etag,
                version_id=version_id,
                source_storage_class=storage_class,
                sha256=checksum.lower() if algo == "sha256" and len(checksum or "") == 64 else "",
                state=ItemState.READY,
            )
        )
        if len(batch) >= ITEM_BATCH:
            PromotionItem.objects.bulk_create(batch)
            batch = []
    if batch:
        PromotionItem.objects.bulk_create(batch)
