"""Holds mirrored onto S3 Object Lock, where a covered object sits in an Object-Lock bucket.

Every hold sets the objects' legal hold; a governance or compliance hold also sets their retention
(GOVERNANCE or COMPLIANCE mode, with a retain-until date: the compliance hold's own, or for a
governance hold a rolling horizon renewed by ``renew_governance_task``); see ``mirror_hold``.

Runs after the hold (or its release) commits, in a worker: one PutObjectLegalHold per object
version is network work that must not keep the run's rows locked. For every present file of the
hold's checkpoints in an Object-Lock bucket the wanted state is worked out from the catalog at that
moment: ON while any active hold covers the checkpoint, OFF once none does (so releasing one of two
holds leaves the objects held).

What the store answers is recorded per object (``ShardFile.legal_hold``: True or False once the
store confirmed it, unchanged when it refused), on the hold (``mirror_state``, ``mirror_detail``)
and in one audit event per run of the mirror. A refusal never undoes the catalog's hold: the
promises read the catalog, and the deletion executor re-checks it before every batch.

A hold also covers objects that appear after it was placed (a new checkpoint of a held run, an
object written again as a new version). Each applied bucket scan asks ``mirror_after_scan`` which
active holds now cover objects in that bucket that the store does not hold (new or changed since
the hold was last mirrored) and queues the mirror of those holds, in its ``missing_only`` form that
sends requests for those objects alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from actions.models import Hold, HoldMode, MirrorState
from actions.protection import protected_ids
from audit.actor import Actor
from audit.services import audit
from catalog.models import CheckpointCopy, ShardFile
from fleet import s3
from fleet.models import Bucket, Inventory

log = logging.getLogger(__name__)
MIRROR_ACTOR = Actor.worker("worker: Object Lock mirror")
ERRORS_KEPT = 5


@shared_task(acks_late=True, name="actions.objectlock.mirror_hold_task")
def mirror_hold_task(hold_id: int, missing_only: bool = False) -> dict:
    return mirror_hold(hold_id, missing_only=missing_only)


def _files(hold: Hold):
    files = ShardFile.objects.filter(
        gone_at__isnull=True, copy__gone_at__isnull=True, location__bucket__object_lock=True
    ).select_related("copy")
    if hold.checkpoint_id is not None:
        return files.filter(copy__checkpoint_id=hold.checkpoint_id)
    return files.filter(copy__checkpoint__run_id=hold.run_id)


@dataclass(frozen=True)
class Retention:
    """The Object Lock retention a checkpoint's objects should have: S3 mode and date."""

    mode: str
    until: datetime
    bypass: bool  # GOVERNANCE -> COMPLIANCE needs the bypass header


def wanted_retention(holds: list[Hold], checkpoint_id: int, *, now: datetime) -> Retention | None:
    """The retention that the active ``holds`` of a run ask for the objects of ``checkpoint_id``.

    A compliance hold whose date is still ahead: COMPLIANCE until the latest such date. Else a
    governance hold: GOVERNANCE for the configured horizon from now (a governance hold has no date;
    the beat task ``renew_governance_task`` moves it on before it lapses), never earlier than a date
    already set. Legal holds ask for none: their legal hold is enough, as before.
    """
    covering = [h for h in holds if h.checkpoint_id in (None, checkpoint_id)]
    governed = [h for h in covering if h.mode == HoldMode.GOVERNANCE]
    retained = [
        h.retain_until
        for h in covering
        if h.mode == HoldMode.COMPLIANCE and h.retain_until is not None and h.retain_until > now
    ]
    if retained:
        return Retention("COMPLIANCE", max(retained), bypass=bool(governed))
    if governed:
        horizon = (now + timedelta(days=settings.HOLD_GOVERNANCE_RETENTION_DAYS)).replace(microsecond=0)
        already = [h.mirror_retain_until for h in governed if h.mirror_retain_until is not None]
        return Retention("GOVERNANCE", max([horizon, *already]), bypass=False)
    return None


def mirror_hold(hold_id: int, *, missing_only: bool = False) -> dict:
    """Bring the Object Lock state of the objects a hold covers in line with the catalog; idempotent.

    Every mode sets the legal hold, ON while any active hold covers the object and OFF once none does.
    Governance and compliance holds also set the object's retention (``wanted_retention``); releasing a
    governance hold lifts a GOVERNANCE retention with the bypass header once no hold asks for one. A
    COMPLIANCE retention is never lifted: it lapses at its date, which the catalog's hold cannot precede.

    ``missing_only`` (after a scan) asks the store only about the objects of an active hold that the
    catalog does not know to be held: a run of a million held objects that gained one checkpoint
    costs that checkpoint's requests. With nothing missing it changes nothing and writes no event.
    """
    hold = Hold.objects.get(pk=hold_id)
    held, _ = protected_ids([hold.run_id])
    now = timezone.now()
    run_holds = list(Hold.objects.filter(run_id=hold.run_id, released_at__isnull=True))
    files = _files(hold)
    if missing_only and hold.active:
        files = files.exclude(legal_hold=True)
        if not files.exists():
            return {"state": str(hold.mirror_state), "on": 0, "off": 0, "refused": 0}
    buckets = {b.location_id: b for b in Bucket.objects.filter(object_lock=True)}
    clients: dict[int, object] = {}
    on_ok: list[int] = []
    off_ok: list[int] = []
    errors: list[str] = []
    failed = 0
    retention_set: dict[str, int] = {}
    lifted = 0
    latest: dict[str, datetime] = {}
    lift = hold.mode == HoldMode.GOVERNANCE and not hold.active
    for f in files.iterator(chunk_size=2000):
        bucket = buckets.get(f.location_id)
        if bucket is None:
            continue
        want = f.copy.checkpoint_id in held
        retention = wanted_retention(run_holds, f.copy.checkpoint_id, now=now) if want else None
        prefix = bucket.prefix if not bucket.prefix or bucket.prefix.endswith("/") else bucket.prefix + "/"
        key = prefix + f.path
        try:
            if f.location_id not in clients:
                clients[f.location_id] = s3.client_for(bucket)
            client = clients[f.location_id]
            s3.set_legal_hold(client, bucket.bucket_name, key, on=want, version_id=f.version_id)
            if retention is not None:
                s3.set_retention(
                    client,
                    bucket.bucket_name,
                    key,
                    mode=retention.mode,
                    until=retention.until,
                    version_id=f.version_id,
                    bypass_governance=retention.bypass,
                )
                retention_set[retention.mode] = retention_set.get(retention.mode, 0) + 1
                latest[retention.mode] = max(latest.get(retention.mode, retention.until), retention.until)
            elif lift:
                s3.lift_retention(client, bucket.bucket_name, key, version_id=f.version_id)
                lifted += 1
        except s3.S3Error as exc:
            failed += 1
            if len(errors) < ERRORS_KEPT:
                errors.append(exc.message)
            continue
        (on_ok if want else off_ok).append(f.pk)

    done = len(on_ok) + len(off_ok)
    if failed == 0:
        state = MirrorState.DONE if done else MirrorState.NONE
    else:
        state = MirrorState.PARTIAL if done else MirrorState.FAILED
    detail = f"{len(on_ok)} object(s) set ON, {len(off_ok)} set OFF, {failed} refused by the store"
    for mode, n in sorted(retention_set.items()):
        detail += f"; {mode} retention until {latest[mode]:%Y-%m-%d %H:%M} UTC on {n}"
    if lifted:
        detail += f"; GOVERNANCE retention lifted from {lifted}"
    if errors:
        detail += ": " + "; ".join(errors)
    own = {HoldMode.GOVERNANCE: "GOVERNANCE", HoldMode.COMPLIANCE: "COMPLIANCE"}.get(hold.mode)
    with transaction.atomic():
        current = Hold.objects.select_for_update(of=("self",)).select_related("run__team", "checkpoint").get(pk=hold_id)
        for chunk in range(0, len(on_ok), 5000):
            ShardFile.objects.filter(pk__in=on_ok[chunk : chunk + 5000]).update(legal_hold=True)
        for chunk in range(0, len(off_ok), 5000):
            ShardFile.objects.filter(pk__in=off_ok[chunk : chunk + 5000]).update(legal_hold=False)
        fields = ["mirror_state", "mirror_detail", "mirrored_at", "mirror_objects", "mirror_refused"]
        if missing_only:
            current.mirror_objects += done
            current.mirror_refused = failed
        else:
            current.mirror_objects, current.mirror_refused = done, failed
        if own is not None and own in latest and current.active:
            current.mirror_mode = own
            current.mirror_retain_until = max(latest[own], current.mirror_retain_until or latest[own])
            fields += ["mirror_mode", "mirror_retain_until"]
        elif lift and failed == 0:
            current.mirror_mode, current.mirror_retain_until = "", None
            fields += ["mirror_mode", "mirror_retain_until"]
        current.mirror_state = state
        current.mirror_detail = detail[:4000]
        current.mirrored_at = timezone.now()
        current.save(update_fields=fields)
        target = current.checkpoint or current.run
        audit(
            MIRROR_ACTOR,
            "hold.mirror",
            target_type="checkpoint" if current.checkpoint_id else "run",
            target_id=target.pk,
            target_label=str(target),
            case_ref=current.case_ref,
            after={
                "hold": current.pk,
                "mode": current.mode,
                "released": current.released_at is not None,
                "state": state,
                "on": len(on_ok),
                "off": len(off_ok),
                "refused": failed,
                "retention": {
                    mode: {"objects": n, "until": latest[mode].isoformat()} for mode, n in sorted(retention_set.items())
                },
                "retention_lifted": lifted,
                "errors": errors,
            },
        )
        # A hold placed or released while this ran may want the opposite state: mirror again.
        if protected_ids([hold.run_id])[0] != held:
            transaction.on_commit(lambda: mirror_hold_task.delay(hold_id))
    return {"state": str(state), "on": len(on_ok), "off": len(off_ok), "refused": failed, "lifted": lifted}


@shared_task(acks_late=True, name="actions.objectlock.renew_governance_task")
def renew_governance_task() -> list[int]:
    return renew_governance()


def renew_governance(*, now: datetime | None = None) -> list[int]:
    """Queue the mirror of every active governance hold whose Object Lock retention has less than half of its
    horizon left (``HOLD_GOVERNANCE_RETENTION_DAYS``); their ids. Daily from beat: a governance hold has no date,
    so its retention in the store is a rolling one that must not lapse while the hold stands."""
    now = now or timezone.now()
    due = now + timedelta(days=settings.HOLD_GOVERNANCE_RETENTION_DAYS / 2)
    holds = Hold.objects.filter(
        released_at__isnull=True, mode=HoldMode.GOVERNANCE, mirror_state__in=(MirrorState.DONE, MirrorState.PARTIAL)
    ).filter(Q(mirror_retain_until__isnull=True) | Q(mirror_retain_until__lt=due))
    ids = list(holds.values_list("pk", flat=True))
    for hold_id in ids:
        transaction.on_commit(lambda pk=hold_id: mirror_hold_task.delay(pk))
    if ids:
        log.info("governance holds %s: Object Lock retention renewed", ids)
    return ids


def mirror_after_scan(*, inventory: Inventory) -> list[int]:
    """Queue the mirror of every active hold that covers objects this bucket's scans added unheld; their ids.

    Called once a scan of an Object-Lock bucket is applied. A hold qualifies when a present object it
    covers at that location is not known to be held and was written by this scan or by one that
    finished after the hold was last mirrored (a queued mirror that was lost is caught up by the
    next scan). An object the store refused keeps its refusal on the hold until it changes; it is
    not asked for again on every scan.
    """
    location_id = inventory.location_id
    if not Bucket.objects.filter(location_id=location_id, object_lock=True).exists():
        return []
    present_here = CheckpointCopy.objects.filter(
        location_id=location_id, gone_at__isnull=True, checkpoint__run_id=OuterRef("run_id")
    )
    holds = Hold.objects.filter(released_at__isnull=True).filter(Exists(present_here))
    unheld = ShardFile.objects.filter(
        location_id=location_id, gone_at__isnull=True, copy__gone_at__isnull=True
    ).exclude(legal_hold=True)
    queued = []
    for hold_id, run_id, checkpoint_id, mirrored_at in holds.values_list(
        "pk", "run_id", "checkpoint_id", "mirrored_at"
    ):
        files = (
            unheld.filter(copy__checkpoint_id=checkpoint_id)
            if checkpoint_id
            else unheld.filter(copy__checkpoint__run_id=run_id)
        )
        if mirrored_at is not None:
            since = Inventory.objects.filter(location_id=location_id, finished_at__gte=mirrored_at).values("pk")
            files = files.filter(Q(changed_by_id=inventory.pk) | Q(changed_by_id__in=since))
        if files.exists():
            queued.append(hold_id)
    for hold_id in queued:
        transaction.on_commit(lambda pk=hold_id: mirror_hold_task.delay(pk, missing_only=True))
    if queued:
        log.info("scan %s: objects new under holds %s; their Object Lock mirror is queued", inventory.pk, queued)
    return queued
