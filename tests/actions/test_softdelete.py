"""Soft delete against moto's S3 server: trash, restore and purge by exact key and version (issue 15, item 2).

Buckets are filled by boto3 and scanned for real; jobs come from ``schedule_deletion``; only time is moved
(the grace period and the recovery window end by moving their dates into the past).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from actions import execution, services, softdelete
from actions.models import DeletionItem, DeletionJob, DeletionState, Hold, ItemState
from audit.models import AuditEvent
from catalog.models import ShardFile
from ckptfleet.errors import DomainError, PermissionRefused
from ckptfleet.units import bytes_iec
from fleet.models import StorageLocation
from fleet.pricebook import GIB, PriceBook, utc_today
from fleet.services import location_set_soft_delete
from tests.actions.test_execution import run_due, versions
from tests.actions.test_execution_versions import markers
from tests.helpers.deletion import OPERATOR, checkpoint, make_due

pytestmark = pytest.mark.django_db

STEP_100 = "fleet/llm/llama-tiny/step-100/"


@pytest.fixture(autouse=True)
def _week_of_trash(settings):
    settings.SOFT_DELETE_DAYS = 7


def content(s3, bucket: str) -> dict[str, bytes]:
    """What a reader of the bucket sees: every current key and its bytes."""
    found = {}
    for page in s3.client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", ()):
            found[o["Key"]] = s3.client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return found


def execute(job, django_capture_on_commit_callbacks) -> DeletionJob:
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    return job


def end_window(job) -> None:
    past = timezone.now() - timedelta(seconds=1)
    DeletionItem.objects.filter(job=job).update(reclaim_after=past)
    DeletionJob.objects.filter(pk=job.pk).update(reclaim_after=past)


@pytest.fixture
def unversioned(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"
    return name, bucket


def test_versioned_trash_then_restore_gives_back_exactly_the_planned_content(
    s3, scanned, django_capture_on_commit_callbacks
):
    name, _bucket = scanned
    before_content, before_versions = content(s3, name), versions(s3, name)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    job = execute(job, django_capture_on_commit_callbacks)

    assert job.state == DeletionState.COMPLETED, job.outcome
    assert job.outcome.startswith("3 of 3 moved to the trash, recoverable until ")
    assert job.reclaim_after is not None and job.reclaim_after > timezone.now() + timedelta(days=6)
    items = list(DeletionItem.objects.filter(job=job))
    assert {i.state for i in items} == {ItemState.TRASHED} and all(i.trash_ref for i in items)
    # Hidden, not deleted: every version is still stored, and a reader no longer sees the planned keys.
    assert before_versions <= versions(s3, name)
    assert {(i.path, i.trash_ref) for i in items} == set(markers(s3, name))
    assert not any(k.startswith(STEP_100) for k in content(s3, name))
    assert ShardFile.objects.filter(path__startswith="llm/llama-tiny/step-100/", gone_at__isnull=True).count() == 0
    [reclaim] = softdelete.pending_reclaim(job=job)
    assert reclaim.items == 3 and reclaim.bytes == job.bytes_total

    with django_capture_on_commit_callbacks(execute=True):
        softdelete.restore(job=job, reason="wrong checkpoint", actor=OPERATOR)
    job.refresh_from_db()
    assert job.state == DeletionState.RESTORED
    assert "3 of 3 restored from the trash" in job.outcome
    assert content(s3, name) == before_content and versions(s3, name) == before_versions
    assert markers(s3, name) == []
    assert ShardFile.objects.filter(path__startswith="llm/llama-tiny/step-100/", gone_at__isnull=True).count() == 3
    [event] = AuditEvent.objects.filter(action="deletion.restore", after__deletion=job.pk)
    assert event.reason == "wrong checkpoint" and event.after["items"] == 3
    assert softdelete.pending_reclaim(job=job) == []
    with pytest.raises(DomainError, match="nothing in the trash"):
        softdelete.restore(job=job, reason="again", actor=OPERATOR)


def test_versioned_purge_removes_exactly_the_planned_versions_and_their_markers(
    s3, scanned, django_capture_on_commit_callbacks
):
    name, _bucket = scanned
    before = versions(s3, name)
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    planned = set(DeletionItem.objects.filter(job=job).values_list("path", "version_id"))
    # Proof of reclaim: the versions are in the trash (noncurrent, behind markers), nothing is reclaimed yet.
    assert (job.proof_state, job.bytes_in_trash, job.bytes_reclaimed) == ("confirmed", job.bytes_total, 0)
    # Someone writes a new version of one key after it went to the trash: it is never hidden nor deleted.
    key = sorted(p for p, _ in planned)[0]
    written = s3.put(name, key, b"written after the trash")["VersionId"]

    assert softdelete.purge_due() == {"purged": {}}  # the window is still open
    end_window(job)
    with django_capture_on_commit_callbacks(execute=True):
        assert softdelete.purge_due() == {"purged": {job.pk: 3}}
    job.refresh_from_db()  # the purge is proved too: the planned versions are listed no more
    assert (job.proof_state, job.bytes_in_trash, job.bytes_reclaimed) == ("confirmed", 0, job.bytes_total)
    assert job.money_reclaimed > 0

    assert markers(s3, name) == []
    after = versions(s3, name)
    assert before - after == planned and (key, written) in after
    assert s3.client.get_object(Bucket=name, Key=key)["Body"].read() == b"written after the trash"
    assert set(DeletionItem.objects.filter(job=job).values_list("state", flat=True)) == {ItemState.DELETED}
    [event] = AuditEvent.objects.filter(action="deletion.purge", after__deletion=job.pk)
    assert event.after["purged"] == 3
    with pytest.raises(DomainError):
        softdelete.restore(job=job, reason="too late", actor=OPERATOR)


def test_a_version_written_while_trashing_is_never_hidden(s3, scanned, django_capture_on_commit_callbacks, monkeypatch):
    name, _bucket = scanned
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    key = sorted(DeletionItem.objects.filter(job=job).values_list("path", flat=True))[0]
    real = execution.trash.s3.delete_objects
    written = {}

    def racing(client, bucket, objects):
        # Right before the marker is added, another writer puts a new version of the key.
        if objects and objects[0][0] == key and not objects[0][1] and not written:
            written["v"] = s3.put(name, key, b"racing writer")["VersionId"]
        return real(client, bucket, objects)

    monkeypatch.setattr(execution.trash.s3, "delete_objects", racing)
    job = execute(job, django_capture_on_commit_callbacks)
    item = DeletionItem.objects.get(job=job, path=key)
    assert item.state == ItemState.SKIPPED and item.detail.startswith("changed since scheduling")
    assert s3.client.get_object(Bucket=name, Key=key)["Body"].read() == b"racing writer"
    assert [m for m in markers(s3, name) if m[0] == key] == []
    assert "2 of 3 moved to the trash" in job.outcome


def test_unversioned_trash_restore_and_purge(s3, unversioned, django_capture_on_commit_callbacks):
    name, _bucket = unversioned
    before = content(s3, name)
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    assert job.state == DeletionState.COMPLETED and "3 of 3 moved to the trash" in job.outcome, job.outcome
    now = content(s3, name)
    planned = {i.path: i.trash_ref for i in DeletionItem.objects.filter(job=job)}
    assert all(ref == f".ckptfleet-trash/{job.pk}/{path}" for path, ref in planned.items())
    assert {now[ref] for ref in planned.values()} == {before[p] for p in planned}
    assert not set(planned) & set(now)

    # One original key is written again meanwhile: its restore is refused, the others come back.
    taken = sorted(planned)[0]
    s3.put(name, taken, b"someone else's file")
    with django_capture_on_commit_callbacks(execute=True):
        softdelete.restore(job=job, reason="wrong checkpoint", actor=OPERATOR)
    job.refresh_from_db()
    assert "2 of 3 restored" in job.outcome and "1 could not go back" in job.outcome
    after = content(s3, name)
    assert after[taken] == b"someone else's file"
    assert all(after[p] == before[p] for p in planned if p != taken)
    left = DeletionItem.objects.get(job=job, path=taken)
    assert left.state == ItemState.TRASHED and "holds another object" in left.detail

    end_window(job)
    softdelete.purge_due()
    assert not any(k.startswith(".ckptfleet-trash/") for k in content(s3, name))
    assert content(s3, name)[taken] == b"someone else's file"


def test_archived_objects_of_an_unversioned_bucket_stay_and_say_why_before_and_after(
    s3, scan_now, django_capture_on_commit_callbacks, signed_in
):
    """S3 copies no unrestored GLACIER or DEEP_ARCHIVE object, so without versioning it cannot reach the trash: the
    preview says so before anything is scheduled, and the executed job leaves it in place with that reason (not
    "changed since scheduling")."""
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/", classes={"llm/llama-tiny/step-100/__1_0.distcp": "DEEP_ARCHIVE"})
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"
    archived = STEP_100 + "__1_0.distcp"

    preview = services.preview(checkpoint=checkpoint(100))
    [line] = preview.archived_stay
    size = ShardFile.objects.get(path="llm/llama-tiny/step-100/__1_0.distcp", gone_at__isnull=True).size
    assert preview.archived_stay_bytes == size
    assert line.startswith(f"1 object ({bytes_iec(size)}) at {bucket.location.name} is in GLACIER or DEEP_ARCHIVE")
    assert "without versioning" in line and "leave it in place" in line
    page = signed_in.get(f"/actions/checkpoints/{checkpoint(100).pk}/delete/").content.decode()
    # "Frees" counts only what goes: the archived object stays, and is said beside it. Nor does it save money or
    # cost an early deletion: what the same deletion without a trash (all of it goes) would say, less that object.
    assert preview.freed_bytes == preview.bytes - size > 0
    StorageLocation.objects.filter(pk=bucket.location.pk).update(soft_delete_days=0)
    hard = services.preview(checkpoint=checkpoint(100))
    StorageLocation.objects.filter(pk=bucket.location.pk).update(soft_delete_days=bucket.location.soft_delete_days)
    assert hard.archived_stay == [] and hard.freed_bytes == hard.bytes == preview.bytes
    price = PriceBook.load().price(bucket.location, "deep_archive", "DEEP_ARCHIVE", utc_today())
    assert price and preview.monthly_cost == hard.monthly_cost - (price * size / GIB).quantize(Decimal("0.01"))
    assert (hard.early_deletion.objects, preview.early_deletion.objects) == (1, 0)  # DEEP_ARCHIVE's 180 days
    frees = f'<dt>Frees</dt><dd title="{preview.freed_bytes:,} bytes">{bytes_iec(preview.freed_bytes)} '
    assert "Some objects will stay" in page and frees in page and f"({bytes_iec(size)} more stays: archived" in page
    answer = signed_in.get(f"/api/v1/actions/deletions/preview/?checkpoint={checkpoint(100).pk}").json()
    assert answer["left_in_place"] == [line] and answer["left_in_place_bytes"] == size
    assert answer["freed_bytes"] == preview.freed_bytes and answer["bytes"] == preview.bytes
    bulk = signed_in.get("/actions/bulk/", {"action": "delete-checkpoint", "item": [str(checkpoint(100).pk)]})
    bulk_page = bulk.content.decode()
    assert line.rstrip(".") in bulk_page
    assert frees in bulk_page and f"({bytes_iec(size)} more stays: archived, see the notes)" in bulk_page

    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    left = DeletionItem.objects.get(job=job, path=archived)
    assert left.state == ItemState.SKIPPED and left.get_state_display() == "Skipped (left in place)"
    assert left.detail.startswith("left in place: it is in an archive storage class"), left.detail
    assert "2 of 3 moved to the trash" in job.outcome and "1 skipped and left in place" in job.outcome, job.outcome
    now = {o["Key"] for o in s3.client.list_objects_v2(Bucket=name)["Contents"]}
    assert archived in now and not any(k.startswith(f".ckptfleet-trash/{job.pk}/{archived}") for k in now)


def test_a_deletion_whose_every_object_would_stay_is_said_to_a_person_and_refused_to_a_policy(s3, scan_now, signed_in):
    """All of step 100 in DEEP_ARCHIVE at a trash without versioning: as things stand the job would delete nothing.
    A person is told so and may still schedule it (objects restored by the time it runs do go to the trash; a
    restore keeps the storage class, so the catalog cannot tell); a policy, which would schedule the same no-op
    again at each run, is refused and nothing is written."""
    name = s3.bucket()
    step = "llm/llama-tiny/step-100/"
    archived = {step + f: "DEEP_ARCHIVE" for f in (".metadata", "__0_0.distcp", "__1_0.distcp")}
    s3.upload_tree(name, "nvme-a", prefix="fleet/", classes=archived)
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"

    by_hand = services.preview(checkpoint=checkpoint(100))
    assert by_hand.allowed and by_hand.freed_bytes == 0 and by_hand.archived_stay_bytes == by_hand.bytes
    assert "unless they are restored by the time it runs" in by_hand.archived_stay[0]
    page = signed_in.get(f"/actions/checkpoints/{checkpoint(100).pk}/delete/").content.decode()
    assert "As things stand, this deletion deletes nothing" in page
    answer = signed_in.get(f"/api/v1/actions/deletions/preview/?checkpoint={checkpoint(100).pk}").json()
    assert answer["allowed"] is True and answer["freed_bytes"] == 0

    by_policy = services.preview(checkpoint=checkpoint(100), origin="policy:1")
    assert not by_policy.allowed and by_policy.refusal_code == "all_left_in_place"
    assert by_policy.refusal.startswith("a policy does not schedule a deletion that would delete nothing: 3 objects")
    jobs, events = DeletionJob.objects.count(), AuditEvent.objects.count()
    with pytest.raises(DomainError, match="would delete nothing"):
        services.schedule_deletion(checkpoint=checkpoint(100), reason="policy", actor=OPERATOR, origin="policy:1")
    assert (DeletionJob.objects.count(), AuditEvent.objects.count()) == (jobs, events)


def test_archived_objects_of_a_versioned_bucket_are_hidden_by_a_marker_and_the_preview_warns_of_nothing(
    s3, scan_now, django_capture_on_commit_callbacks
):
    """With versioning (which the scan reads from the store) the trash is a delete marker, which needs no copy: an
    archived object goes to the trash like any other, so the preview has nothing to warn of."""
    name = s3.bucket(versioned=True)
    s3.upload_tree(name, "nvme-a", prefix="fleet/", classes={"llm/llama-tiny/step-100/__1_0.distcp": "DEEP_ARCHIVE"})
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"
    bucket.refresh_from_db()
    assert bucket.versioning == "Enabled"

    preview = services.preview(checkpoint=checkpoint(100))
    assert preview.archived_stay == [] and preview.archived_stay_bytes == 0
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    assert set(DeletionItem.objects.filter(job=job).values_list("state", flat=True)) == {ItemState.TRASHED}


def test_a_bucket_scan_does_not_list_the_trash(s3, scan_now, django_capture_on_commit_callbacks):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    assert scan_now(bucket).status == "applied"
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    assert DeletionItem.objects.filter(job=job, state=ItemState.TRASHED).count() == 3
    assert scan_now(bucket).status == "applied"
    assert not ShardFile.objects.filter(path__startswith=".ckptfleet-trash", gone_at__isnull=True).exists()


def test_a_held_checkpoint_keeps_its_trash(s3, scanned, django_capture_on_commit_callbacks):
    name, _bucket = scanned
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    stored = versions(s3, name)
    ckpt = checkpoint(100)
    services.hold(run=ckpt.run, checkpoint=ckpt, reason="litigation", case_ref="CASE-1", actor=OPERATOR)
    end_window(job)
    assert softdelete.purge_due() == {"purged": {job.pk: 0}}
    assert versions(s3, name) == stored
    assert set(DeletionItem.objects.filter(job=job).values_list("state", flat=True)) == {ItemState.TRASHED}
    assert Hold.objects.filter(checkpoint=ckpt).exists()


def test_a_location_window_of_zero_deletes_at_once(s3, scanned, django_capture_on_commit_callbacks):
    _name, bucket = scanned
    location_set_soft_delete(location=bucket.location, days=0, reason="scratch bucket", actor=OPERATOR)
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    assert job.outcome.startswith("3 of 3 deleted") and job.reclaim_after is None
    event = AuditEvent.objects.get(action="location.soft_delete", target_id=bucket.location.pk)
    assert event.before["effective_days"] == 7 and event.after["effective_days"] == 0


def test_compliance_refuses_turning_the_trash_off(s3, scanned, settings):
    _name, bucket = scanned
    settings.SOFT_DELETE_REQUIRED = True
    with pytest.raises(PermissionRefused, match="cannot be 0"):
        location_set_soft_delete(location=bucket.location, days=0, reason="scratch", actor=OPERATOR)
    bucket.location.refresh_from_db()
    assert bucket.location.soft_delete_days is None
    assert not AuditEvent.objects.filter(action="location.soft_delete").exists()
    location_set_soft_delete(location=bucket.location, days=30, reason="a month", actor=OPERATOR)
    bucket.location.refresh_from_db()
    assert bucket.location.trash_days == 30


def test_the_api_restores_for_an_operator_and_refuses_a_viewer(
    s3, scanned, signed_in_as, django_capture_on_commit_callbacks
):
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    url = f"/api/v1/actions/deletions/{job.pk}/restore/"
    viewer = signed_in_as("viewer")
    assert viewer.post(url, {"reason": "mine"}, content_type="application/json").status_code == 403
    operator = signed_in_as("operator")
    assert operator.post(url, {}, content_type="application/json").status_code == 400
    assert DeletionJob.objects.get(pk=job.pk).state == DeletionState.COMPLETED
    with django_capture_on_commit_callbacks(execute=True):
        answer = operator.post(url, {"reason": "resume"}, content_type="application/json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["state"] == DeletionState.RESTORED
    assert AuditEvent.objects.filter(action="deletion.restore", after__deletion=job.pk).count() == 1


def test_a_zero_set_before_compliance_does_not_turn_the_trash_off(
    s3, scanned, settings, django_capture_on_commit_callbacks
):
    _name, bucket = scanned
    location_set_soft_delete(location=bucket.location, days=0, reason="scratch", actor=OPERATOR)
    settings.SOFT_DELETE_REQUIRED = True
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    assert "3 of 3 moved to the trash" in job.outcome, job.outcome


def test_the_api_sets_a_locations_window_for_an_admin_only_and_compliance_refuses_zero(
    s3, scanned, signed_in_as, settings
):
    _name, bucket = scanned
    url = f"/api/v1/locations/{bucket.location.pk}/soft-delete/"
    operator, admin = signed_in_as("operator"), signed_in_as("admin")
    assert operator.post(url, {"days": 3, "reason": "r"}, content_type="application/json").status_code == 403
    for bad in ({"days": "3", "reason": "r"}, {"days": True, "reason": "r"}, {"days": -1, "reason": "r"}, {"days": 3}):
        assert admin.post(url, bad, content_type="application/json").status_code == 400, bad
    settings.SOFT_DELETE_REQUIRED = True
    refused = admin.post(url, {"days": 0, "reason": "scratch"}, content_type="application/json")
    assert refused.status_code == 403 and "cannot be 0" in refused.content.decode()
    bucket.location.refresh_from_db()
    assert bucket.location.soft_delete_days is None
    assert not AuditEvent.objects.filter(action="location.soft_delete").exists()
    done = admin.post(url, {"days": 14, "reason": "two weeks"}, content_type="application/json")
    assert done.status_code == 200 and done.json()["trash_days"] == 14
    [event] = AuditEvent.objects.filter(action="location.soft_delete")
    assert (event.actor_label, event.after["soft_delete_days"]) == (admin.user.username, 14)
    # Shortening it waits for a second person: 202 and a change request (tests/approvals/test_soft_delete_quorum.py).
    asked = admin.post(url, {"days": 3, "reason": "shorter"}, content_type="application/json")
    assert asked.status_code == 202 and asked.json()["state"] == "awaiting_approval"
    bucket.location.refresh_from_db()
    assert bucket.location.trash_days == 14


def test_the_settings_refuse_a_zero_default_when_compliance_requires_the_trash():
    env = {**os.environ, "CKPTFLEET_SOFT_DELETE_REQUIRED": "1", "CKPTFLEET_SOFT_DELETE_DAYS": "0"}
    code = "import django; django.setup()"
    answer = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert answer.returncode != 0
    assert "CKPTFLEET_SOFT_DELETE_REQUIRED=1 refuses CKPTFLEET_SOFT_DELETE_DAYS=0" in answer.stderr


def test_a_restore_from_the_trash_of_an_unversioned_bucket_keeps_the_storage_class(
    s3, scan_now, django_capture_on_commit_callbacks
):
    """Issue 27 item 8: the copy back named STANDARD, so an infrequent-access checkpoint came back billed as
    STANDARD. It comes back in the class the scan listed it in."""
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/", classes={"llm/llama-tiny/step-100/*": "STANDARD_IA"})
    assert scan_now(s3.register(name, prefix="fleet/")).status == "applied"
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    assert "3 of 3 moved to the trash" in job.outcome, job.outcome
    with django_capture_on_commit_callbacks(execute=True):
        softdelete.restore(job=job, reason="wrong checkpoint", actor=OPERATOR)
    job.refresh_from_db()
    assert "3 of 3 restored" in job.outcome, job.outcome
    paths = list(DeletionItem.objects.filter(job=job).values_list("path", flat=True))
    assert len(paths) == 3
    assert {s3.client.head_object(Bucket=name, Key=p).get("StorageClass") for p in paths} == {"STANDARD_IA"}
