"""Soft delete: restoring an executed deletion from the trash, and purging the trash when its window ends.

An executed deletion at a location with a recovery window (``StorageLocation.trash_days``) moves its
objects and files to a trash (``actions.trash`` for buckets; a ``.ckptfleet-trash`` directory on the
same filesystem for hosts, moved by the host's agent) instead of deleting them. Until the window ends
an operator may restore the whole job in one audited action (``restore``): the job becomes RESTORED at
once, its items RESTORING, and a worker (buckets) and the hosts' agents (files) put each one back;
each item that cannot go back (its key or path holds something else now) stays in the trash and says
why. When the window ends, beat purges the trash (``purge_due``), never for a checkpoint that is held
now (promise 1: a hold placed while its files are in the trash keeps them there).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone

from access.roles import Role, require_role
from actions import execution, promises, reclaim, trash
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from audit.actor import Actor
from audit.choices import ActorKind
from catalog import hooks
from catalog.models import ShardFile
from catalog.services import location_recognize
from ckptfleet.celery import task
from ckptfleet.errors import DomainError, PermissionRefused
from fleet import s3
from fleet.choices import LocationKind
from fleet.models import Bucket, Host, StorageLocation
from fleet.pricebook import GIB, PriceBook, utc_today
from fleet.services import host_root_or_refuse

log = logging.getLogger(__name__)

WORKER = Actor.worker("trash worker")
MAX_REASON = 2000


def _reason(value) -> str:
    text = value.strip() if isinstance(value, str) else None
    if not text:
        raise DomainError("a reason is required", code="required")
    if len(text) > MAX_REASON:
        raise DomainError(f"the reason is longer than {MAX_REASON} characters")
    return text


# --- restore: one action for the whole job ----------------------------------------------------------


def restore(*, job: DeletionJob, reason: str, actor: Actor, request_id: str = "") -> DeletionJob:
    """Undo a soft deletion: everything of ``job`` still in the trash goes back where it was.

    An operator's action, audited once ("deletion.restore") in the transaction that marks the job
    RESTORED and its trashed items RESTORING; the store work follows in a worker and the agents.
    """
    reason = _reason(reason)
    if actor.kind == ActorKind.USER:
        if actor.user is None:
            raise PermissionRefused("restoring a deletion needs the signed-in user")
        require_role(
            actor.user,
            Role.OPERATOR,
            doing="restoring a deletion",
            source=actor.source,
            target_type="checkpoint" if job.checkpoint_id else "location",
            target_id=job.checkpoint_id or job.orphan_location_id,
        )
    now = timezone.now()
    with transaction.atomic():
        current = execution.lock(job.pk)
        if current is None:
            raise DomainError("no such deletion", code="not_found")
        trashed = DeletionItem.objects.filter(job=current, state=ItemState.TRASHED)
        if current.state not in (DeletionState.COMPLETED, DeletionState.BLOCKED) or not trashed.exists():
            raise DomainError(
                f"deletion {current.pk} is {current.get_state_display().lower()} and has nothing in the trash; "
                "only an executed deletion whose recovery window is still open can be restored",
                code="not_restorable",
            )
        if trashed.filter(reclaim_after__lte=now).exists():
            raise DomainError(
                f"the recovery window of deletion {current.pk} has ended; its trash is being purged",
                code="not_restorable",
            )
        count = trashed.count()
        size = sum(trashed.values_list("size", flat=True))
        trashed.update(state=ItemState.RESTORING, detail="", done_at=None)
        before = current.state
        DeletionJob.objects.filter(pk=current.pk).update(
            state=DeletionState.RESTORED,
            restored_label=actor.label,
            restored_at=now,
            outcome=f"Restore from the trash asked by {actor.label}: {reason} ({count} items)",
        )
        execution.audit_job(
            current,
            actor,
            "deletion.restore",
            reason=reason,
            before={"state": before},
            after={"state": DeletionState.RESTORED, "items": count, "bytes": size},
            request_id=request_id,
        )
        transaction.on_commit(lambda: task("actions.tasks.restore_deletion").delay(current.pk))
    current.refresh_from_db()
    return current


def restore_buckets(job_id: int) -> int:
    """Put the job's restoring bucket objects back, one location at a time; returns how many went back."""
    restored = 0
    while True:
        with transaction.atomic():
            job = execution.lock(job_id)
            if job is None or job.state != DeletionState.RESTORED:
                return restored
            items = list(
                DeletionItem.objects.filter(job=job, state=ItemState.RESTORING, location__kind=LocationKind.BUCKET)
                .select_related("shard_file")
                .order_by("location_id", "pk")[: execution.BATCH]
            )
            if not items:
                _settle(job, actor=WORKER)
                return restored
            location_id = items[0].location_id
            items = [i for i in items if i.location_id == location_id]
            bucket = Bucket.objects.select_related("location").get(location_id=location_id)
            client = s3.client_for(bucket)
            back, refused = [], []
            for item in items:
                why = trash.restore(client, bucket.bucket_name, item)
                (refused if why else back).append((item, why))
            now = timezone.now()
            DeletionItem.objects.filter(pk__in=[i.pk for i, _ in back]).update(
                state=ItemState.RESTORED, detail="", done_at=now
            )
            for item, why in refused:
                DeletionItem.objects.filter(pk=item.pk).update(state=ItemState.TRASHED, detail=why)
            _mark_present([i for i, _ in back])
            execution.audit_job(
                job,
                WORKER,
                "deletion.restore_batch",
                after={"location": bucket.location.name, "restored": len(back), "refused": len(refused)},
            )
            restored += len(back)


def _mark_present(items: list[DeletionItem]) -> None:
    """Shard files whose rows still describe the restored object or file (same version, or size and mtime) are
    present again; a row written since describes something else and stays as it is."""
    for item in items:
        if not item.shard_file_id:
            continue
        rows = ShardFile.objects.filter(pk=item.shard_file_id, gone_at__isnull=False, size=item.size)
        if item.version_id:
            rows = rows.filter(Q(version_id=item.version_id) | Q(version_id=""))
        else:
            rows = rows.filter(mtime=item.mtime)
        rows.update(gone_at=None, changed_at=timezone.now())


def _settle(job: DeletionJob, *, actor: Actor) -> None:
    """With nothing of a restored job left to put back, say how it went and judge its locations again."""
    states = Counter(DeletionItem.objects.filter(job=job).values_list("state", flat=True))
    if states[ItemState.RESTORING]:
        return
    done = f"{states[ItemState.RESTORED]} of {job.items_total} restored from the trash"
    if states[ItemState.TRASHED]:
        done += f"; {states[ItemState.TRASHED]} could not go back and stay in the trash (see each item)"
    if job.outcome.endswith(done) or done in job.outcome:
        return
    outcome = f"{job.outcome}; {done}"[:2000]
    DeletionJob.objects.filter(pk=job.pk).update(outcome=outcome)
    execution.audit_job(
        job,
        actor,
        "deletion.restored",
        reason=done,
        after={"restored": states[ItemState.RESTORED], "left_in_trash": states[ItemState.TRASHED]},
    )
    now = timezone.now()
    touched = DeletionItem.objects.filter(job=job, state=ItemState.RESTORED).values_list("location_id", flat=True)
    for location in StorageLocation.objects.filter(pk__in=list(touched)).order_by("pk").locked():
        location_recognize(location=location)
        hooks.location_rejudged(location, now)


# --- purge: the end of the window -------------------------------------------------------------------


def purge_due(*, now: datetime | None = None) -> dict:
    """Purge the bucket objects whose window ended, job by job, each purge audited ("deletion.purge").

    A checkpoint held now keeps its trash (the purge waits for the release). Host files are purged by
    their agents, which this lists to them (``agent_pending``).
    """
    now = now or timezone.now()
    due = (
        DeletionItem.objects.filter(state=ItemState.TRASHED, reclaim_after__lte=now, location__kind=LocationKind.BUCKET)
        .values_list("job_id", flat=True)
        .distinct()
    )
    purged: dict[int, int] = {}
    for job_id in sorted(set(due))[:1000]:
        purged[job_id] = _purge_job(job_id, now=now)
    # A restore whose worker died (or met a store error) leaves bucket items restoring: send it again.
    lost = (
        DeletionItem.objects.filter(
            state=ItemState.RESTORING,
            location__kind=LocationKind.BUCKET,
            job__state=DeletionState.RESTORED,
            job__restored_at__lt=now - execution.LEASE,
        )
        .values_list("job_id", flat=True)
        .distinct()
    )
    resent = sorted(set(lost))[:1000]
    for job_id in resent:
        task("actions.tasks.restore_deletion").delay(job_id)
    return {"purged": purged, "restores_resent": resent} if resent else {"purged": purged}


def _purge_job(job_id: int, *, now: datetime) -> int:
    total = 0
    with transaction.atomic():
        job = execution.lock(job_id)
        if job is None or _job_held(job):
            return 0
        items = DeletionItem.objects.filter(
            job=job, state=ItemState.TRASHED, reclaim_after__lte=now, location__kind=LocationKind.BUCKET
        )
        by_location: dict[int, list[DeletionItem]] = defaultdict(list)
        for item in items.order_by("location_id", "pk"):
            by_location[item.location_id].append(item)
        left: list[dict] = []
        for location_id, group in by_location.items():
            bucket = Bucket.objects.select_related("location").get(location_id=location_id)
            client = s3.client_for(bucket)
            outcomes = trash.purge(client, bucket.bucket_name, group)
            gone = [
                i
                for i, o in zip(group, outcomes, strict=True)
                if o.deleted or o.code in ("NoSuchKey", "NoSuchVersion", "404")
            ]
            DeletionItem.objects.filter(pk__in=[i.pk for i in gone]).update(
                state=ItemState.DELETED, detail="purged from the trash at the end of its window"
            )
            left.extend(
                {"key": i.path, "code": o.code, "message": o.message}
                for i, o in zip(group, outcomes, strict=True)
                if i not in gone
            )
            total += len(gone)
        if total:
            reclaim.queue(job.pk)  # the purged bytes are proved gone, and counted as reclaimed
        if total or left:
            execution.audit_job(
                job,
                WORKER,
                "deletion.purge",
                reason="the recovery window ended",
                after={"purged": total, "left": len(left), "refused": left[:20]},
            )
    return total


# --- hosts: what the agents purge and restore -------------------------------------------------------


def agent_pending(*, host: Host, root: str = "", soft: bool = False, limit: int = execution.BATCH) -> list[dict]:
    """The agent's work: files to delete or trash (``execution.agent_pending``), and to an agent that can,
    trashed files whose window ended ("purge"; not while the checkpoint is held) and files to "restore"."""
    listed = execution.agent_pending(host=host, root=root, limit=limit, soft=soft)
    if not soft or len(listed) >= limit:
        return listed
    if root:
        host_root_or_refuse(host, root)
    now = timezone.now()
    mine = DeletionItem.objects.filter(location__host=host, location__kind__in=execution.HOST_KINDS)
    if root:
        mine = mine.filter(location__root_path=root)
    # A purge the agent skipped (the file in the trash changed) is not asked again: it stays trashed, with its reason.
    purge = mine.filter(state=ItemState.TRASHED, reclaim_after__lte=now).exclude(detail__startswith=PURGE_SKIPPED)
    held = [j for j in purge.values_list("job_id", flat=True).distinct()[:100] if _held(j)]
    work = (
        (purge.exclude(job_id__in=held), "purge"),
        (mine.filter(state=ItemState.RESTORING, job__state=DeletionState.RESTORED), "restore"),
    )
    for rows, action in work:
        for r in rows.order_by("job_id", "pk").values(
            "pk", "job_id", "location__root_path", "path", "size", "mtime", "trash_ref"
        )[: limit - len(listed)]:
            listed.append(
                {
                    "id": r["pk"],
                    "job": r["job_id"],
                    "root": r["location__root_path"],
                    "path": r["path"],
                    "size": r["size"],
                    "mtime": r["mtime"].timestamp(),
                    "action": action,
                    "trash_path": r["trash_ref"],
                }
            )
    return listed


def _held(job_id: int) -> bool:
    return _job_held(DeletionJob.objects.select_related("checkpoint__run").get(pk=job_id))


def _job_held(job: DeletionJob) -> bool:
    """A held checkpoint keeps its trash; an orphan clean-up has no checkpoint (its items were re-checked one by
    one before they went to the trash)."""
    return job.checkpoint_id is not None and promises.held(job.checkpoint) is not None


TRASH_RESULTS = {"purged", "restored"}
PURGE_SKIPPED = "purge skipped by the agent, left in the trash: "
PURGE_GONE = "purged already"  # the agent's word for a trashed file that was no longer there (``purge_file``)


def _purge_asked(item: DeletionItem, job: DeletionJob, *, now: datetime) -> str:
    """ "" when the server asked for this item's purge (its window has ended, no hold covers its checkpoint, and the
    agent had not skipped it), else why a host's "purged" for it is not believed."""
    if item.reclaim_after is None or item.reclaim_after > now:
        return "its recovery window has not ended"
    if _job_held(job):
        return "a hold covers its checkpoint"
    if item.detail.startswith(PURGE_SKIPPED):
        return "its purge was skipped before and not asked again"
    return ""


def agent_report(*, host: Host, results: list) -> dict[str, int]:
    """Record an agent's report: results for pending files go to ``execution.agent_report``; "purged" and
    "restored" (or "skipped"/"failed") for trashed and restoring files are recorded here, audited per job.

    The trash records only what the server asked for: a "purged" (or "skipped") for a trashed file is believed
    only when its window has ended and no hold covers its checkpoint (``_purge_asked``); otherwise the item stays
    trashed and restorable, and the job's event names it under ``not_asked``. A purge the agent skipped because
    the file changed stays trashed and counted (``pending_reclaim``), its reason in its detail, and is not asked
    again; a file the agent found gone from the trash already ("purged already: missing ...") is deleted."""
    if not isinstance(results, list) or not results:
        raise DomainError('send {"results": [{"id": ..., "result": "...", "detail": ...}]}')
    ids = [e.get("id") for e in results if isinstance(e, dict)]
    ids = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
    states = dict(DeletionItem.objects.filter(pk__in=ids).values_list("pk", "state"))
    trash_side = {ItemState.TRASHED, ItemState.RESTORING}
    theirs = [e for e in results if not (isinstance(e, dict) and states.get(e.get("id")) in trash_side)]
    ours = [e for e in results if isinstance(e, dict) and states.get(e.get("id")) in trash_side]
    counts = {"recorded": 0, "ignored": 0}
    for entry in ours:
        if entry.get("result") not in (*TRASH_RESULTS, "skipped", "failed") or not isinstance(
            entry.get("detail", ""), str
        ):
            raise DomainError(f"item {entry.get('id')}: result must be purged, restored, skipped or failed")
    owners = dict(DeletionItem.objects.filter(pk__in=[e["id"] for e in ours]).values_list("pk", "location__host_id"))
    foreign = [pk for pk, owner in owners.items() if owner != host.pk]
    if foreign:
        raise PermissionRefused(f"items {', '.join(map(str, sorted(foreign)[:10]))} are not files of host {host.name}")
    if theirs:
        counts = execution.agent_report(host=host, results=theirs)
    by_job: dict[int, list[dict]] = defaultdict(list)
    for pk, job_id in DeletionItem.objects.filter(pk__in=list(owners)).values_list("pk", "job_id"):
        by_job[job_id].extend(e for e in ours if e["id"] == pk)
    actor = Actor.agent(host.name)
    for job_id, entries in sorted(by_job.items()):
        with transaction.atomic():
            job = execution.lock(job_id)
            if job is None:
                continue
            tally: Counter[str] = Counter()
            back = []
            unasked: list[dict] = []
            now = timezone.now()
            for entry in entries:
                item = DeletionItem.objects.select_for_update(of=("self",)).get(pk=entry["id"])
                result, detail = entry["result"], entry.get("detail", "")[:500]
                why_not = _purge_asked(item, job, now=now) if item.state == ItemState.TRASHED else ""
                if item.state == ItemState.TRASHED and result in ("purged", "skipped") and why_not:
                    # Not asked for: the item stays in the trash, its window and restore as they were.
                    tally["not_asked"] += 1
                    unasked.append({"item": item.pk, "path": item.path, "result": result, "why": why_not})
                    continue
                if item.state == ItemState.TRASHED and (
                    result == "purged" or (result == "skipped" and detail.startswith(PURGE_GONE))
                ):
                    item.state, item.detail = ItemState.DELETED, (detail or "purged from the trash")
                elif item.state == ItemState.TRASHED and result == "skipped":
                    # The agent left it (the file in the trash changed): still in the trash, counted, with why.
                    item.detail = (PURGE_SKIPPED + (detail or "no reason given"))[:500]
                    tally["purge_skipped"] += 1
                    item.save(update_fields=["detail"])
                    continue
                elif item.state == ItemState.RESTORING and result == "restored":
                    item.state, item.detail = ItemState.RESTORED, ""
                    back.append(item)
                elif item.state == ItemState.RESTORING and result == "skipped":
                    item.state, item.detail = ItemState.TRASHED, f"not restored: {detail}"
                else:
                    tally["ignored"] += 1
                    continue
                item.done_at = timezone.now()
                item.save(update_fields=["state", "detail", "done_at"])
                tally[result] += 1
            _mark_present(back)
            counts["recorded"] += sum(v for k, v in tally.items() if k not in ("ignored", "not_asked"))
            counts["ignored"] += tally["ignored"]
            if tally["not_asked"]:
                counts["not_asked"] = counts.get("not_asked", 0) + tally["not_asked"]
            action = (
                "deletion.purge"
                if tally["purged"]
                else "deletion.restore_batch"
                if tally["restored"]
                else "deletion.agent_trash_report"
            )
            after: dict = dict(tally)
            if unasked:
                after["not_asked"] = unasked[:50]
                after["not_asked_count"] = len(unasked)
            execution.audit_job(job, actor, action, after=after)
            if job.state == DeletionState.RESTORED:
                _settle(job, actor=actor)
    return counts


# --- spend: what the trash still costs ---------------------------------------------------------------


@dataclass(frozen=True)
class PendingReclaim:
    """Bytes in the trash at one location: stored and billed until ``until``, when the last of them is purged."""

    location: StorageLocation
    items: int
    bytes: int
    until: datetime
    monthly_cost: Decimal | None
    currency: str


def pending_reclaim(*, job: DeletionJob | None = None, team_ids: list[int] | None = None) -> list[PendingReclaim]:
    """The trash per location (of one job, or of the teams ``team_ids``; None: all), priced at today's price of
    the location's tier: what it costs per month until the window ends. One query, plus the price book."""
    rows = DeletionItem.objects.filter(state__in=(ItemState.TRASHED, ItemState.RESTORING))
    if job is not None:
        rows = rows.filter(job=job)
    if team_ids is not None:
        rows = rows.filter(job__checkpoint__run__team_id__in=team_ids)
    totals = list(
        rows.values("location_id").annotate(n=Count("pk"), size=Sum("size"), until=Max("reclaim_after")).order_by()
    )
    if not totals:
        return []
    locations = StorageLocation.objects.in_bulk([t["location_id"] for t in totals])
    book, today = PriceBook.load(), utc_today()
    found = []
    for t in totals:
        location = locations[t["location_id"]]
        price = book.price(location, location.tier, "", today)
        cost = Decimal(t["size"]) / GIB * price if price is not None else None
        found.append(PendingReclaim(location, t["n"], t["size"], t["until"], cost, book.currency))
    return sorted(found, key=lambda p: (-p.bytes, p.location.name))
