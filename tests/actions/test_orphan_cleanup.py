"""Orphan clean-up against a real S3 endpoint (moto's server): unclaimed objects and a real incomplete multipart
upload, found by a real scan, frozen by ``actions.orphans.schedule_cleanup`` and carried out by the deletion
executor. Only the grace period is shortened (``make_due``), as time passing would."""

from __future__ import annotations

import json

import pytest

from actions import execution, orphans, services
from actions.models import DeletionItem, DeletionJob, DeletionScope, DeletionState, Hold, ItemKind, ItemState
from audit.models import AuditEvent
from catalog import selectors
from catalog.choices import RunStatus
from catalog.models import Checkpoint, CheckpointCopy, ShardFile
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.models import MultipartUpload
from tests.actions.conftest import ORPHANED_SCRATCH, as_ui, make_person
from tests.helpers.deletion import OPERATOR, make_due

pytestmark = pytest.mark.django_db

SCRATCH = ORPHANED_SCRATCH


def keys(s3, bucket: str) -> set[str]:
    found = set()
    for page in s3.client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        found |= {v["Key"] for v in page.get("Versions", ())}
    return found


def run_due(capture) -> dict:
    with capture(execute=True):
        return execution.start_due()


def location_events(job: DeletionJob) -> list[str]:
    return list(
        AuditEvent.objects.filter(target_type="location", target_id=job.orphan_location_id, after__deletion=job.pk)
        .order_by("id")
        .values_list("action", flat=True)
    )


def test_the_scan_groups_the_strays_and_the_upload_as_the_page_shows(orphaned):
    _name, bucket, upload_id = orphaned
    groups = {(g.kind, g.prefix): g for g in selectors.orphans(location_id=bucket.location_id)}
    assert groups[("unclaimed", "scratch")].items == 2
    assert groups[("unclaimed", "llm/llama-tiny")].items == 1
    assert groups[("multipart", "scratch")].items == 1
    assert MultipartUpload.objects.get(upload_id=upload_id).bytes == 1024


def test_unclaimed_objects_and_an_incomplete_upload_are_cleaned_up_exactly(
    s3, orphaned, django_capture_on_commit_callbacks
):
    name, bucket, upload_id = orphaned
    before = keys(s3, name)
    preview = orphans.preview(kind="unclaimed", location=bucket.location_id, prefix="scratch")
    assert (preview.files, preview.uploads, preview.bytes) == (2, 0, 8000)
    assert [r["path"] for r in preview.sample] == sorted(SCRATCH)
    files_job = orphans.schedule_cleanup(
        kind="unclaimed", location=bucket.location_id, prefix="scratch", reason="stray dumps", actor=OPERATOR
    )
    uploads_job = orphans.schedule_cleanup(
        kind="multipart", location=bucket.location_id, prefix="scratch/", reason="abandoned upload", actor=OPERATOR
    )
    assert files_job.scope == DeletionScope.ORPHANS and files_job.checkpoint_id is None
    frozen = list(DeletionItem.objects.filter(job=files_job).values_list("path", "version_id", "size"))
    assert sorted(p for p, _, _ in frozen) == sorted(SCRATCH) and all(v for _, v, _ in frozen)
    (upload_item,) = DeletionItem.objects.filter(job=uploads_job)
    assert (upload_item.kind, upload_item.path, upload_item.upload_id) == (
        ItemKind.UPLOAD,
        "fleet/scratch/big.bin",
        upload_id,
    )
    scheduled = AuditEvent.objects.get(action="deletion.schedule", after__deletion=files_job.pk)
    assert (scheduled.target_type, scheduled.target_id, scheduled.after["scope"]) == (
        "location",
        bucket.location_id,
        "orphans",
    )

    assert files_job.state == DeletionState.AWAITING_APPROVAL  # files the product cannot identify
    assert "no checkpoint the product recognises" in files_job.approval_reasons[0]
    assert uploads_job.state == DeletionState.SCHEDULED
    make_due(files_job)
    assert run_due(django_capture_on_commit_callbacks)["started"] == []  # not approved yet (and the upload's grace)
    services.approve(job=files_job, actor=as_ui(make_person("april", "approver")))
    make_due(files_job)
    make_due(uploads_job)
    assert sorted(run_due(django_capture_on_commit_callbacks)["started"]) == sorted([files_job.pk, uploads_job.pk])

    for job in (files_job, uploads_job):
        job.refresh_from_db()
        assert job.state == DeletionState.COMPLETED, job.outcome
        assert job.items_deleted == job.items_total
        assert location_events(job)[-2:] == ["deletion.complete", "deletion.proof"]
        assert job.proof_state == "confirmed" and job.bytes_reclaimed == job.bytes_total  # uploads: no longer listed
    assert keys(s3, name) == before - set(SCRATCH)
    assert s3.client.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
    assert MultipartUpload.objects.get(upload_id=upload_id).gone_at is not None
    assert not ShardFile.objects.filter(location=bucket.location, path__startswith="scratch/", gone_at__isnull=True)
    assert [g for g in selectors.orphans(location_id=bucket.location_id) if g.prefix == "scratch"] == []


def test_a_file_claimed_by_a_checkpoint_after_scheduling_is_left_and_named(
    s3, orphaned, django_capture_on_commit_callbacks
):
    name, bucket, _ = orphaned
    job = orphans.schedule_cleanup(
        kind="unclaimed", location=bucket.location_id, prefix="scratch", reason="stray dumps", actor=OPERATOR
    )
    # A rescan recognised dump-2.bin as part of a checkpoint since (as a sidecar manifest written later would).
    copy = CheckpointCopy.objects.filter(location=bucket.location).select_related("checkpoint").first()
    ShardFile.objects.filter(location=bucket.location, path="scratch/dump-2.bin").update(copy=copy)
    services.approve(job=job, actor=as_ui(make_person("april", "approver")))
    make_due(job)
    run_due(django_capture_on_commit_callbacks)

    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    left = DeletionItem.objects.get(job=job, path="fleet/scratch/dump-2.bin")
    assert left.state == ItemState.SKIPPED
    assert left.detail.startswith(f"claimed by checkpoint {copy.checkpoint} since scheduling")
    assert "fleet/scratch/dump-2.bin" in keys(s3, name)
    assert "fleet/scratch/dump-1.bin" not in keys(s3, name)
    assert "1 skipped" in job.outcome


def test_a_deleted_runs_copy_whose_checkpoint_is_held_since_is_never_deleted(
    s3, orphaned, django_capture_on_commit_callbacks
):
    name, bucket, _ = orphaned
    checkpoint = Checkpoint.objects.get(run__name="llama-tiny", step=100)
    checkpoint.run.status = RunStatus.DELETED
    checkpoint.run.save(update_fields=["status"])
    group = next(g for g in selectors.orphans(kind="deleted_run") if g.run_id == checkpoint.run_id)
    job = orphans.schedule_cleanup(
        kind="deleted_run",
        location=bucket.location_id,
        prefix=group.prefix,
        run=checkpoint.run_id,
        reason="the run was deleted",
        actor=OPERATOR,
    )
    assert job.state == DeletionState.AWAITING_APPROVAL  # copies of a deleted run: a second person approves
    approver = make_person("april", "approver")
    services.approve(job=job, actor=as_ui(approver))
    services.hold(run=checkpoint.run, checkpoint=checkpoint, reason="audit", case_ref="CASE-9", actor=OPERATOR)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)

    job.refresh_from_db()
    held = DeletionItem.objects.filter(job=job, copy__checkpoint=checkpoint)
    assert held.exists() and set(held.values_list("state", flat=True)) == {ItemState.SKIPPED}
    assert all("which is held, case CASE-9" in d for d in held.values_list("detail", flat=True))
    assert {
        f"fleet/{p}" for p in ShardFile.objects.filter(copy__checkpoint=checkpoint).values_list("path", flat=True)
    } <= keys(s3, name)
    assert Hold.objects.filter(checkpoint=checkpoint, released_at__isnull=True).exists()


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({"kind": "unclaimed", "prefix": "no/such/dir"}, "nothing to clean up"),
        ({"kind": "everything", "prefix": "scratch"}, "unknown orphan kind"),
        ({"kind": "all_partial", "prefix": "scratch"}, "checkpoints whose every copy is partial"),
        ({"kind": "deleted_run", "prefix": "scratch"}, "name the run"),
    ],
)
def test_an_unknown_group_is_refused_and_changes_nothing(orphaned, group, message):
    _name, bucket, _ = orphaned
    events = AuditEvent.objects.count()
    with pytest.raises(DomainError, match=message):
        orphans.schedule_cleanup(location=bucket.location_id, reason="tidy", actor=OPERATOR, **group)
    assert not DeletionJob.objects.exists()
    assert AuditEvent.objects.count() == events


def test_a_viewer_and_a_team_scoped_operator_are_refused(orphaned, settings):
    _name, bucket, _ = orphaned
    viewer = make_person("vic", "viewer")
    with pytest.raises(PermissionRefused, match="operator role"):
        orphans.schedule_cleanup(
            kind="unclaimed", location=bucket.location_id, prefix="scratch", reason="tidy", actor=as_ui(viewer)
        )
    settings.CKPTFLEET_TEAM_SCOPING = True
    scoped = make_person("sam", "operator", "team:vision")
    with pytest.raises(PermissionRefused, match="whole fleet"):
        orphans.schedule_cleanup(
            kind="unclaimed", location=bucket.location_id, prefix="scratch", reason="tidy", actor=as_ui(scoped)
        )
    assert not DeletionJob.objects.exists()


def test_the_same_orphans_are_not_frozen_twice_and_a_cancelled_job_frees_them(orphaned):
    _name, bucket, _ = orphaned
    first = orphans.schedule_cleanup(
        kind="unclaimed", location=bucket.location_id, prefix="scratch", reason="tidy", actor=OPERATOR
    )
    with pytest.raises(DomainError, match=f"already in deletion {first.pk}"):
        orphans.schedule_cleanup(
            kind="unclaimed", location=bucket.location_id, prefix="scratch", reason="tidy", actor=OPERATOR
        )
    services.cancel(job=first, reason="not now", actor=OPERATOR)
    assert location_events(first) == ["deletion.schedule", "deletion.cancel"]
    again = orphans.schedule_cleanup(
        kind="unclaimed", location=bucket.location_id, prefix="scratch", reason="tidy", actor=OPERATOR
    )
    assert again.items_total == 2


def test_the_scan_reads_whether_a_rule_already_aborts_incomplete_uploads(s3, orphaned, scan_now):
    name, bucket, _ = orphaned
    bucket.refresh_from_db()
    assert bucket.abort_uploads_days == 0  # no lifecycle configuration yet
    rule = orphans.lifecycle_rule(bucket.location)
    assert rule is not None and rule.days_in_place == 0
    s3.client.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration=json.loads(rule.json))
    assert scan_now(bucket).status == "applied"
    bucket.refresh_from_db()
    assert bucket.abort_uploads_days == 7
    assert orphans.lifecycle_rule(bucket.location).days_in_place == 7
