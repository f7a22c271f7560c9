"""Holds mirrored to S3 Object Lock legal holds, against moto's S3 server over HTTP."""

from __future__ import annotations

import pytest

from actions import services
from actions.models import MirrorState
from catalog.models import AuditEvent, Checkpoint, ShardFile
from ckptfleet.errors import DomainError
from fleet.choices import InventoryStatus
from tests.actions.conftest import as_ui

pytestmark = pytest.mark.django_db


@pytest.fixture
def locked(s3, scan_now):
    """An Object-Lock bucket holding the nvme-a fixture tree, scanned into the catalog."""
    name = s3.bucket(object_lock=True)
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, fetch_checksums=False)
    inventory = scan_now(bucket)
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    bucket.refresh_from_db()
    assert bucket.object_lock
    return name


def store_status(s3, bucket: str, f: ShardFile) -> str:
    try:
        answer = s3.client.get_object_legal_hold(Bucket=bucket, Key=f.path, VersionId=f.version_id)
    except s3.client.exceptions.ClientError as exc:
        if "NoSuchObjectLockConfiguration" in str(exc) or "ObjectLockConfigurationNotFound" in str(exc):
            return "OFF"
        raise
    return (answer.get("LegalHold") or {}).get("Status") or "OFF"


def files_of(checkpoint) -> list[ShardFile]:
    return list(ShardFile.objects.filter(copy__checkpoint=checkpoint, gone_at__isnull=True).order_by("path"))


def test_a_hold_is_mirrored_as_legal_holds_and_lifted_when_no_hold_covers_the_objects(
    s3, locked, django_capture_on_commit_callbacks, olga, oscar
):
    ckpt = Checkpoint.objects.filter(copies__location__bucket__bucket_name=locked, step__isnull=False).first()
    others = [
        f for f in ShardFile.objects.filter(gone_at__isnull=True) if f.copy is None or f.copy.checkpoint_id != ckpt.pk
    ]
    mine = files_of(ckpt)
    assert mine and others

    with django_capture_on_commit_callbacks(execute=True):
        first = services.hold(run=ckpt.run, checkpoint=ckpt, reason="litigation", case_ref="LEG-A", actor=as_ui(olga))
    first.refresh_from_db()
    assert first.mirror_state == MirrorState.DONE, first.mirror_detail
    assert {store_status(s3, locked, f) for f in mine} == {"ON"}
    assert all(f.legal_hold for f in files_of(ckpt))
    assert {store_status(s3, locked, f) for f in others[:5]} == {"OFF"}
    mirror = AuditEvent.objects.filter(action="hold.mirror").get()
    assert mirror.after["on"] == len(mine) and mirror.after["refused"] == 0 and mirror.actor_kind == "worker"

    # A second hold (on the whole run) keeps the objects held when the first is released.
    with django_capture_on_commit_callbacks(execute=True):
        second = services.hold(run=ckpt.run, reason="regulator", case_ref="LEG-B", actor=as_ui(oscar))
    with django_capture_on_commit_callbacks(execute=True):
        services.release(hold=first, reason="case closed", actor=as_ui(oscar))
    assert {store_status(s3, locked, f) for f in mine} == {"ON"}

    with django_capture_on_commit_callbacks(execute=True):
        services.release(hold=second, reason="case closed", actor=as_ui(olga))
    assert {store_status(s3, locked, f) for f in mine} == {"OFF"}
    assert not any(f.legal_hold for f in files_of(ckpt))
    second.refresh_from_db()
    assert second.mirror_state == MirrorState.DONE and "set OFF" in second.mirror_detail


def test_a_store_that_refuses_leaves_the_hold_standing_and_says_so(
    s3, locked, django_capture_on_commit_callbacks, olga, oscar
):
    ckpt = Checkpoint.objects.filter(copies__location__bucket__bucket_name=locked, step__isnull=False).first()
    mine = files_of(ckpt)
    # The catalog names a version the store does not have: the store refuses that one object.
    ShardFile.objects.filter(pk=mine[0].pk).update(version_id="no-such-version")

    with django_capture_on_commit_callbacks(execute=True):
        held = services.hold(run=ckpt.run, checkpoint=ckpt, reason="litigation", case_ref="LEG-C", actor=as_ui(olga))
    held.refresh_from_db()
    assert held.active
    assert held.mirror_state == (MirrorState.PARTIAL if len(mine) > 1 else MirrorState.FAILED)
    assert "1 refused by the store" in held.mirror_detail
    event = AuditEvent.objects.get(action="hold.mirror")
    assert event.after["refused"] == 1 and event.after["errors"]
    assert ShardFile.objects.get(pk=mine[0].pk).legal_hold is not True
    assert {store_status(s3, locked, f) for f in mine[1:]} <= {"ON"}
    # The hold in the catalog is what the promises read: nothing of it can be scheduled for deletion.
    with pytest.raises(DomainError, match="legal hold"):
        services.schedule_deletion(checkpoint=ckpt, reason="x", actor=as_ui(oscar))
