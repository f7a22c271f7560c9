"""Holds mirrored to S3 Object Lock legal holds and retention, against moto's S3 server over HTTP."""

from __future__ import annotations

from datetime import timedelta

import pytest
from botocore.exceptions import ClientError
from django.urls import reverse
from django.utils import timezone

from actions import execution, objectlock, services
from actions.models import DeletionItem, DeletionJob, DeletionState, Hold, HoldMode, ItemState, MirrorState
from audit.models import AuditEvent
from catalog.models import Checkpoint, Run, ShardFile
from ckptfleet.errors import DomainError
from fleet.choices import InventoryStatus
from fleet.models import Bucket
from tests.actions.conftest import as_ui
from tests.s3 import TREES

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


# --- objects that appear after the hold: a scan mirrors the hold onto them ---------------------------


def upload_step(s3, bucket: str, step: int) -> list[str]:
    """Write a new DCP checkpoint of llama-tiny (the step-100 files again), shards first, as a trainer would."""
    source = TREES / "nvme-a" / "llm" / "llama-tiny" / "step-100"
    keys = []
    for name in ("__0_0.distcp", "__1_0.distcp", ".metadata"):
        key = f"llm/llama-tiny/step-{step}/{name}"
        s3.put(bucket, key, (source / name).read_bytes())
        keys.append(key)
    return keys


def mirror_events(hold) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="hold.mirror", after__hold=hold.pk).order_by("id"))


def test_a_checkpoint_written_later_under_a_held_run_is_legal_held_by_the_next_scan_and_the_store_keeps_it(
    s3, locked, scan_now, django_capture_on_commit_callbacks, olga, oscar, april
):
    run = Run.objects.get(name="llama-tiny")
    with django_capture_on_commit_callbacks(execute=True):
        held = services.hold(run=run, reason="litigation", case_ref="LEG-N", actor=as_ui(olga))
    assert len(mirror_events(held)) == 1

    keys = upload_step(s3, locked, 300)
    s3.put(locked, "vision/resnet-tiny/epoch=2-step=300.ckpt", b"not held: another run")
    bucket = Bucket.objects.get(bucket_name=locked)
    assert scan_now(bucket).status == InventoryStatus.APPLIED

    new = Checkpoint.objects.get(run=run, step=300)
    mine = files_of(new)
    assert sorted(f.path for f in mine) == sorted(keys)
    assert {store_status(s3, locked, f) for f in mine} == {"ON"}
    assert all(f.legal_hold is True for f in mine)
    unheld = ShardFile.objects.get(path="vision/resnet-tiny/epoch=2-step=300.ckpt", gone_at__isnull=True)
    assert store_status(s3, locked, unheld) == "OFF"
    events = mirror_events(held)
    assert len(events) == 2
    assert events[1].after["on"] == len(mine) and events[1].after["refused"] == 0  # only the new objects asked
    assert events[1].actor_kind == "worker" and events[1].case_ref == "LEG-N"
    held.refresh_from_db()
    assert held.mirror_state == MirrorState.DONE

    # Scanning again finds the objects held in the store as in the catalog: no mirror, no event.
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    assert len(mirror_events(held)) == 2

    # The catalog's hold is released, and the mirror that would lift the legal holds has not run yet
    # (its worker is down: the commit's callbacks are dropped here). The store still refuses.
    services.release(hold=held, reason="case closed", actor=as_ui(oscar))
    job = services.schedule_deletion(checkpoint=new, reason="superseded", actor=as_ui(oscar))
    if job.needs_approval:
        job = services.approve(job=job, actor=as_ui(april))
    DeletionJob.objects.filter(pk=job.pk).update(execute_after=timezone.now() - timedelta(seconds=1))
    with django_capture_on_commit_callbacks(execute=True):
        execution.start_due()

    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED
    assert (job.items_deleted, job.items_blocked) == (0, len(mine))
    assert "refused by the store" in job.outcome
    assert {i.state for i in DeletionItem.objects.filter(job=job)} == {ItemState.BLOCKED}
    alert = AuditEvent.objects.get(action="deletion.refused_by_store", after__deletion=job.pk)
    assert sorted(o["key"] for o in alert.after["objects"]) == sorted(keys)
    assert {store_status(s3, locked, f) for f in mine} == {"ON"}  # still there, still held


def test_an_object_written_again_under_a_held_checkpoint_gets_the_legal_hold_on_its_new_version(
    s3, locked, scan_now, django_capture_on_commit_callbacks, olga
):
    ckpt = Checkpoint.objects.get(run__name="llama-tiny", step=100)
    with django_capture_on_commit_callbacks(execute=True):
        held = services.hold(run=ckpt.run, checkpoint=ckpt, reason="audit", case_ref="LEG-V", actor=as_ui(olga))
    before = {f.path: f.version_id for f in files_of(ckpt)}
    rewritten = "llm/llama-tiny/step-100/__0_0.distcp"
    source = TREES / "nvme-a" / rewritten
    s3.put(locked, rewritten, source.read_bytes())  # the same bytes again: a new version, not held yet

    assert scan_now(Bucket.objects.get(bucket_name=locked)).status == InventoryStatus.APPLIED
    after = {f.path: f for f in files_of(ckpt)}
    assert after[rewritten].version_id != before[rewritten]
    assert store_status(s3, locked, after[rewritten]) == "ON"
    assert after[rewritten].legal_hold is True
    old = ShardFile(path=rewritten, version_id=before[rewritten])
    assert store_status(s3, locked, old) == "ON"  # the older version keeps its own hold
    assert mirror_events(held)[-1].after["on"] == 1


def test_a_scan_of_a_bucket_without_object_lock_queues_no_mirror(
    s3, scan_now, django_capture_on_commit_callbacks, olga
):
    name = s3.bucket(versioned=True)
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, fetch_checksums=False)
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    run = Run.objects.get(name="llama-tiny")
    with django_capture_on_commit_callbacks(execute=True):
        held = services.hold(run=run, reason="litigation", case_ref="LEG-X", actor=as_ui(olga))
    upload_step(s3, name, 300)
    inventory = scan_now(bucket)
    assert inventory.status == InventoryStatus.APPLIED
    assert objectlock.mirror_after_scan(inventory=inventory) == []
    assert not mirror_events(held)
    held.refresh_from_db()
    assert held.mirror_state == MirrorState.NONE


# --- governance and compliance holds: Object Lock retention as well -----------------------------------------
# Every hold sets the objects' legal hold; these also set GOVERNANCE or COMPLIANCE retention. The tests play the
# attacker the retention is for: someone with the bucket's keys who first turns the legal hold off, then deletes
# by version id, with the governance bypass header.


def retention(s3, bucket: str, f) -> tuple[str | None, object]:
    answer = s3.client.head_object(Bucket=bucket, Key=f.path, VersionId=f.version_id)
    return answer.get("ObjectLockMode"), answer.get("ObjectLockRetainUntilDate")


def attacker_deletes(s3, bucket: str, f, *, bypass: bool) -> str:
    """Lift the legal hold (as anyone with s3:PutObjectLegalHold may), then delete the version; the store's answer."""
    s3.client.put_object_legal_hold(Bucket=bucket, Key=f.path, VersionId=f.version_id, LegalHold={"Status": "OFF"})
    kwargs = {"Bucket": bucket, "Key": f.path, "VersionId": f.version_id}
    if bypass:
        kwargs["BypassGovernanceRetention"] = True
    try:
        s3.client.delete_object(**kwargs)
    except ClientError as exc:
        return exc.response["Error"]["Code"]
    return "deleted"


def still_there(s3, bucket: str, f) -> bool:
    try:
        s3.client.head_object(Bucket=bucket, Key=f.path, VersionId=f.version_id)
    except ClientError:
        return False
    return True


def test_a_compliance_hold_sets_compliance_retention_that_no_bypass_gets_past_and_its_extension_reaches_the_store(
    s3, locked, django_capture_on_commit_callbacks, olga, oscar, client
):
    ckpt = Checkpoint.objects.filter(copies__location__bucket__bucket_name=locked, step__isnull=False).first()
    mine = files_of(ckpt)
    until = (timezone.now() + timedelta(days=30)).replace(microsecond=0)
    with django_capture_on_commit_callbacks(execute=True):
        made = services.hold(
            run=ckpt.run,
            checkpoint=ckpt,
            reason="regulator",
            case_ref="SEC-1",
            mode=HoldMode.COMPLIANCE,
            retain_until=until,
            actor=as_ui(olga),
        )
    made.refresh_from_db()
    assert made.mirror_state == MirrorState.DONE, made.mirror_detail
    assert (made.mirror_mode, made.mirror_retain_until) == ("COMPLIANCE", until)
    assert (made.mirror_objects, made.mirror_refused) == (len(mine), 0)
    assert {retention(s3, locked, f) for f in mine} == {("COMPLIANCE", until)}
    assert {store_status(s3, locked, f) for f in mine} == {"ON"}
    event = AuditEvent.objects.get(action="hold.mirror", after__hold=made.pk)
    assert event.after["retention"] == {"COMPLIANCE": {"objects": len(mine), "until": until.isoformat()}}

    # With the legal hold lifted behind the product's back, the version still cannot be deleted, bypass or not.
    assert attacker_deletes(s3, locked, mine[0], bypass=True) == "AccessDenied"
    assert attacker_deletes(s3, locked, mine[1], bypass=False) == "AccessDenied"
    answer = s3.client.delete_objects(
        Bucket=locked,
        Delete={"Objects": [{"Key": f.path, "VersionId": f.version_id} for f in mine]},
        BypassGovernanceRetention=True,
    )
    assert not answer.get("Deleted") and len(answer["Errors"]) == len(mine)
    assert all(still_there(s3, locked, f) for f in mine)

    later = until + timedelta(days=60)
    with django_capture_on_commit_callbacks(execute=True):
        services.extend_hold(hold=made, retain_until=later, reason="appeal", actor=as_ui(oscar))
    made.refresh_from_db()
    assert (made.mirror_mode, made.mirror_retain_until, made.mirror_state) == ("COMPLIANCE", later, MirrorState.DONE)
    assert {retention(s3, locked, f) for f in mine} == {("COMPLIANCE", later)}

    # The checkpoint page shows the mirror's state: objects confirmed, refusals, the retention mode and date.
    client.force_login(oscar)
    page = client.get(reverse("catalog:checkpoint-detail", args=[ckpt.pk])).content.decode()
    assert (
        f"Object Lock: Mirrored to Object Lock: {len(mine)} objects confirmed, 0 refusals; "
        f"COMPLIANCE retention until {later:%Y-%m-%d %H:%M:%S} UTC"
    ) in page


def test_a_governance_hold_sets_rolling_governance_retention_renews_it_and_lifts_it_when_released(
    s3, locked, django_capture_on_commit_callbacks, settings, olga, april
):
    ckpt = Checkpoint.objects.filter(copies__location__bucket__bucket_name=locked, step__isnull=False).first()
    mine = files_of(ckpt)
    settings.HOLD_GOVERNANCE_RETENTION_DAYS = 30
    with django_capture_on_commit_callbacks(execute=True):
        made = services.hold(
            run=ckpt.run, checkpoint=ckpt, reason="review", case_ref="GOV-1", mode="governance", actor=as_ui(olga)
        )
    made.refresh_from_db()
    first = made.mirror_retain_until
    assert made.mirror_mode == "GOVERNANCE" and made.mirror_state == MirrorState.DONE, made.mirror_detail
    assert timedelta(days=29) < first - timezone.now() <= timedelta(days=30)
    assert {retention(s3, locked, f) for f in mine} == {("GOVERNANCE", first)}
    # Without the bypass header the store refuses to delete a governed version, even with its legal hold off.
    assert attacker_deletes(s3, locked, mine[0], bypass=False) == "AccessDenied"
    s3.client.put_object_legal_hold(
        Bucket=locked, Key=mine[0].path, VersionId=mine[0].version_id, LegalHold={"Status": "ON"}
    )

    # Renewal: nothing is due while more than half the horizon is left; later the date moves on.
    assert objectlock.renew_governance() == []
    settings.HOLD_GOVERNANCE_RETENTION_DAYS = 45
    with django_capture_on_commit_callbacks(execute=True):
        assert objectlock.renew_governance(now=timezone.now() + timedelta(days=16)) == [made.pk]
    made.refresh_from_db()
    assert made.mirror_retain_until > first + timedelta(days=14)
    assert {retention(s3, locked, f) for f in mine} == {("GOVERNANCE", made.mirror_retain_until)}

    with django_capture_on_commit_callbacks(execute=True):
        services.release(hold=made, reason="review done", case_ref="GOV-1-CLOSE", actor=as_ui(april))
    made.refresh_from_db()
    assert made.mirror_state == MirrorState.DONE and (made.mirror_mode, made.mirror_retain_until) == ("", None)
    assert "GOVERNANCE retention lifted from" in made.mirror_detail
    assert {retention(s3, locked, f)[0] for f in mine} == {None}
    assert {store_status(s3, locked, f) for f in mine} == {"OFF"}
    # Lifted: the version can now be deleted by whoever may delete it (here the test's keys), no bypass needed.
    assert attacker_deletes(s3, locked, mine[0], bypass=False) == "deleted"


def test_a_compliance_hold_over_a_governance_hold_wins_in_the_store(
    s3, locked, django_capture_on_commit_callbacks, olga, april
):
    ckpt = Checkpoint.objects.filter(copies__location__bucket__bucket_name=locked, step__isnull=False).first()
    mine = files_of(ckpt)
    until = (timezone.now() + timedelta(days=90)).replace(microsecond=0)
    with django_capture_on_commit_callbacks(execute=True):
        governance = services.hold(
            run=ckpt.run, reason="review", case_ref="GOV-2", mode="governance", actor=as_ui(olga)
        )
        services.hold(
            run=ckpt.run,
            checkpoint=ckpt,
            reason="order",
            case_ref="SEC-2",
            mode="compliance",
            retain_until=until,
            actor=as_ui(olga),
        )
    assert {retention(s3, locked, f) for f in mine} == {("COMPLIANCE", until)}
    # Releasing the governance hold lifts nothing the compliance hold keeps.
    with django_capture_on_commit_callbacks(execute=True):
        services.release(hold=governance, reason="done", case_ref="GOV-2-C", actor=as_ui(april))
    assert {retention(s3, locked, f) for f in mine} == {("COMPLIANCE", until)}
    assert {store_status(s3, locked, f) for f in mine} == {"ON"}
    assert Hold.objects.get(case_ref="SEC-2").active
