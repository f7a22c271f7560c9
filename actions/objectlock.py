"""Holds mirrored onto S3 Object Lock legal holds, where a covered object sits in an Object-Lock bucket.

Runs after the hold (or its release) commits, in a worker: one PutObjectLegalHold per object
version is network work that must not keep the run's rows locked. For every present file of the
hold's checkpoints in an Object-Lock bucket the wanted state is worked out from the catalog at that
moment: ON while any active hold covers the checkpoint, OFF once none does (so releasing one of two
holds leaves the objects held).

What the store answers is recorded per object (``ShardFile.legal_hold``: True or False once the
store confirmed it, unchanged when it refused), on the hold (``mirror_state``, ``mirror_detail``)
and in one audit event per run of the mirror. A refusal never undoes the catalog's hold: the
promises read the catalog, and the deletion executor re-checks it before every batch.
"""

from __future__ import annotations

from celery import shared_task
from django.db import transaction
from django.utils import timezone

from actions.models import Hold, MirrorState
from actions.protection import protected_ids
from catalog.audit import audit_record
from catalog.choices import ActorKind, EventSource
from catalog.models import ShardFile
from fleet import s3
from fleet.models import Bucket
from fleet.services import Actor

MIRROR_ACTOR = Actor(kind=ActorKind.WORKER, label="worker: Object Lock mirror", source=EventSource.TASK)
ERRORS_KEPT = 5


@shared_task(acks_late=True, name="actions.objectlock.mirror_hold_task")
def mirror_hold_task(hold_id: int) -> dict:
    return mirror_hold(hold_id)


def _files(hold: Hold):
    files = ShardFile.objects.filter(
        gone_at__isnull=True, copy__gone_at__isnull=True, location__bucket__object_lock=True
    ).select_related("copy")
    if hold.checkpoint_id is not None:
        return files.filter(copy__checkpoint_id=hold.checkpoint_id)
    return files.filter(copy__checkpoint__run_id=hold.run_id)


def mirror_hold(hold_id: int) -> dict:
    """Bring the legal holds of the objects a hold covers in line with the catalog; idempotent."""
    hold = Hold.objects.get(pk=hold_id)
    held, _ = protected_ids([hold.run_id])
    buckets = {b.location_id: b for b in Bucket.objects.filter(object_lock=True)}
    clients: dict[int, object] = {}
    on_ok: list[int] = []
    off_ok: list[int] = []
    errors: list[str] = []
    failed = 0
    for f in _files(hold).iterator(chunk_size=2000):
        bucket = buckets.get(f.location_id)
        if bucket is None:
            continue
        want = f.copy.checkpoint_id in held
        prefix = bucket.prefix if not bucket.prefix or bucket.prefix.endswith("/") else bucket.prefix + "/"
        try:
            if f.location_id not in clients:
                clients[f.location_id] = s3.client_for(bucket)
            s3.set_legal_hold(
                clients[f.location_id], bucket.bucket_name, prefix + f.path, on=want, version_id=f.version_id
            )
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
    if errors:
        detail += ": " + "; ".join(errors)
    with transaction.atomic():
        current = Hold.objects.select_for_update(of=("self",)).select_related("run__team", "checkpoint").get(pk=hold_id)
        for chunk in range(0, len(on_ok), 5000):
            ShardFile.objects.filter(pk__in=on_ok[chunk : chunk + 5000]).update(legal_hold=True)
        for chunk in range(0, len(off_ok), 5000):
            ShardFile.objects.filter(pk__in=off_ok[chunk : chunk + 5000]).update(legal_hold=False)
        current.mirror_state = state
        current.mirror_detail = detail[:4000]
        current.mirrored_at = timezone.now()
        current.save(update_fields=["mirror_state", "mirror_detail", "mirrored_at"])
        target = current.checkpoint or current.run
        audit_record(
            actor_kind=MIRROR_ACTOR.kind,
            actor_label=MIRROR_ACTOR.label,
            source=MIRROR_ACTOR.source,
            action="hold.mirror",
            target_type="checkpoint" if current.checkpoint_id else "run",
            target_id=target.pk,
            target_label=str(target),
            case_ref=current.case_ref,
            after={
                "hold": current.pk,
                "released": current.released_at is not None,
                "state": state,
                "on": len(on_ok),
                "off": len(off_ok),
                "refused": failed,
                "errors": errors,
            },
        )
        # A hold placed or released while this ran may want the opposite state: mirror again.
        if protected_ids([hold.run_id])[0] != held:
            transaction.on_commit(lambda: mirror_hold_task.delay(hold_id))
    return {"state": str(state), "on": len(on_ok), "off": len(off_ok), "refused": failed}
