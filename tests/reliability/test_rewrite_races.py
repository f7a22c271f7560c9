"""The reliability scorecard, rewrites against deletions (issue 26, items 4 and 7).

Against moto's S3 server, which (like several S3-compatible stores) ignores the ETag condition of
DeleteObjects but honours DeleteObject's If-Match. In a bucket without versioning a delete names no
version: an object rewritten after the executor checked it (its HEAD, or its trash copy) and before the
delete must survive, with soft delete and without, and the job must say so rather than "deleted" or
"moved to the trash, recoverable" for bytes it lost. A store that honours no condition at all gets no hard
delete there. And the versions of a job's version-less items are looked up per directory, not per key.

The rewrite is made at the exact moment between the check and the delete, by wrapping the call that ends
the check (``fleet.s3.object_state`` for the HEAD, ``fleet.s3.copy_object`` for the trash copy): no sleep,
no timing luck, so one round says it all. Each prints its figure; RELIABILITY_LONG=1 lists a bigger batch.
"""

from __future__ import annotations

from collections import Counter

import pytest

from actions import services, softdelete
from actions.models import DeletionItem, DeletionState, ItemState
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Checkpoint, ShardFile
from fleet import s3 as fleet_s3
from fleet.choices import DeleteCondition
from fleet.models import Bucket
from fleet.services import bucket_set_delete_condition
from tests.actions.test_execution import run_due, versions
from tests.helpers.deletion import OPERATOR, make_due
from tests.reliability.conftest import report, scale

pytestmark = pytest.mark.django_db

NEW = b"written again between the check and the delete"


def checkpoint(step: int) -> Checkpoint:
    return Checkpoint.objects.get(run__name="llama-tiny", step=step)


def unversioned_bucket(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"
    return name, bucket


def body(s3, name: str, key: str) -> bytes | None:
    try:
        return s3.client.get_object(Bucket=name, Key=key)["Body"].read()
    except s3.client.exceptions.NoSuchKey:
        return None


def rewrite_after(monkeypatch, s3, name: str, key: str, *, call: str, when) -> list[str]:
    """Wrap ``fleet.s3.<call>`` so that the first call for which ``when(kwargs/args)`` holds rewrites ``key``
    right after it returns: the moment between the executor's last look at the object and its delete."""
    done: list[str] = []
    original = getattr(fleet_s3, call)

    def wrapped(*args, **kwargs):
        answer = original(*args, **kwargs)
        if not done and when(args, kwargs):
            s3.put(name, key, NEW)
            done.append(key)
        return answer

    monkeypatch.setattr(fleet_s3, call, wrapped)
    return done


def test_an_object_rewritten_between_its_head_and_the_hard_delete_survives(
    s3, scan_now, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.SOFT_DELETE_DAYS = 0
    name, _bucket = unversioned_bucket(s3, scan_now)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    key = DeletionItem.objects.filter(job=job).order_by("path").first().path
    done = rewrite_after(monkeypatch, s3, name, key, call="object_state", when=lambda a, k: a[1:3] == (name, key))
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()

    assert done == [key], "the executor never HEADed the object"
    assert body(s3, name, key) == NEW, "the rewritten object was deleted"
    item = DeletionItem.objects.get(job=job, path=key)
    assert item.state == ItemState.SKIPPED and "changed since scheduling" in item.detail, item.detail
    assert job.state == DeletionState.COMPLETED and job.outcome.startswith("2 of 3 deleted"), job.outcome
    assert "1 skipped" in job.outcome
    assert ShardFile.objects.filter(path=key.removeprefix("fleet/"), gone_at__isnull=True).exists()
    assert Bucket.objects.get(bucket_name=name).delete_condition == DeleteCondition.SINGLE
    assert AuditEvent.objects.filter(action="bucket.delete_condition").count() == 1
    report("rewrite between HEAD and hard delete (no versioning, moto)", "survived, job says 1 skipped as changed")


def test_an_object_rewritten_after_its_trash_copy_survives_and_is_not_called_recoverable(
    s3, scan_now, settings, monkeypatch, django_capture_on_commit_callbacks
):
    settings.SOFT_DELETE_DAYS = 7
    name, _bucket = unversioned_bucket(s3, scan_now)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    key = DeletionItem.objects.filter(job=job).order_by("path").first().path
    done = rewrite_after(monkeypatch, s3, name, key, call="copy_object", when=lambda a, k: k.get("source_key") == key)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()

    assert done == [key], "the executor never copied the object to the trash"
    assert body(s3, name, key) == NEW, "the rewritten object was deleted while its old bytes went to the trash"
    item = DeletionItem.objects.get(job=job, path=key)
    assert item.state == ItemState.SKIPPED and "changed since scheduling" in item.detail, item.detail
    assert not item.trash_ref
    assert job.outcome.startswith("2 of 3 moved to the trash, recoverable"), job.outcome
    assert "1 skipped" in job.outcome
    # Nothing of the rewritten key is left in the trash; the two others are, and come back whole.
    trash_keys = {k for k, _v in versions(s3, name) if k.startswith(fleet_s3.TRASH_PREFIX)}
    assert not any(k.endswith(key) for k in trash_keys) and len(trash_keys) == 2
    with django_capture_on_commit_callbacks(execute=True):
        softdelete.restore(job=job, reason="check the restore", actor=OPERATOR)
    assert body(s3, name, key) == NEW
    assert all(body(s3, name, i.path) for i in DeletionItem.objects.filter(job=job))
    report("rewrite between trash copy and delete (no versioning, moto)", "survived, job says 2 of 3 trashed")


def test_a_store_that_honours_no_condition_gets_no_hard_delete(
    s3, scan_now, settings, django_capture_on_commit_callbacks
):
    settings.SOFT_DELETE_DAYS = 0
    name, bucket = unversioned_bucket(s3, scan_now)
    bucket_set_delete_condition(
        location=bucket.location,
        setting=DeleteCondition.NONE,
        reason="the vendor says DeleteObject ignores If-Match",
        actor=Actor.command(label="tests: admin"),
    )
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    before = versions(s3, name)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()

    assert versions(s3, name) == before  # the refusal changed nothing in the store
    states = Counter(DeletionItem.objects.filter(job=job).values_list("state", flat=True))
    assert states == {ItemState.BLOCKED: 3}
    assert job.state == DeletionState.BLOCKED
    assert "3 refused: the store does not honour a conditional delete" in job.outcome, job.outcome
    assert "deleted" not in job.outcome.replace("0 of 3 deleted", "")
    batch = AuditEvent.objects.get(action="deletion.batch", after__deletion=job.pk)
    assert batch.after["refused_no_condition"] == 3 and batch.after["deleted"] == 0
    assert AuditEvent.objects.filter(action="bucket.delete_condition", target_id=bucket.location_id).count() == 1
    report("hard deletes on a store honouring no condition", f"{states[ItemState.BLOCKED]} of 3 refused, 0 deleted")


def test_the_probe_tells_what_moto_honours_and_leaves_nothing(s3, scan_now):
    name, bucket = unversioned_bucket(s3, scan_now)
    before = versions(s3, name)
    found = fleet_s3.probe_conditional_delete(fleet_s3.client_for(bucket), name)
    assert found == DeleteCondition.SINGLE  # DeleteObjects' ETag ignored, DeleteObject's If-Match honoured
    assert versions(s3, name) == before
    versioned = s3.bucket(versioned=True)
    assert fleet_s3.probe_conditional_delete(fleet_s3.client_for(bucket), versioned) == DeleteCondition.SINGLE
    assert versions(s3, versioned) == set()  # every probe version and marker removed by its id
    report("conditional delete probe on moto", found)


def test_version_lookups_are_one_listing_per_directory(s3, scan_now, monkeypatch, django_capture_on_commit_callbacks):
    name = s3.bucket(versioned=True)
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"
    ShardFile.objects.update(version_id="")  # frozen before the scan's HEAD pass gave the version ids
    calls: Counter = Counter()
    original = fleet_s3.client_for

    def counting(b):
        made = original(b)
        made.meta.events.register(
            "before-call.s3.ListObjectVersions", lambda **kw: calls.update(["ListObjectVersions"])
        )
        return made

    monkeypatch.setattr(fleet_s3, "client_for", counting)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED and job.outcome.startswith("3 of 3 deleted"), job.outcome
    # One directory, three keys (one listing each before) for the deletion, and one more after it: the proof of
    # reclaim lists that directory again (actions/reclaim.py).
    assert calls["ListObjectVersions"] == 2, calls

    # A bigger batch: many keys with two versions each in a few directories, one listing (a page per 1,000
    # versions) per directory instead of one per key.
    n = scale(120, 1200)
    keys = [f"big/d{k % 3}/shard-{k:05d}.bin" for k in range(n)]
    for key in keys:
        s3.put(name, key, b"old " + key.encode())
        s3.put(name, key, b"new " + key.encode())
    calls.clear()
    found = fleet_s3.versions_of_keys(fleet_s3.client_for(bucket), name, keys)
    assert all(len(found[k]) == 2 for k in keys)
    pages = sum(
        -(-(2 * keys_in) // fleet_s3.PAGE_SIZE) for keys_in in Counter(k.rsplit("/", 1)[0] for k in keys).values()
    )
    assert calls["ListObjectVersions"] <= pages, calls
    report(
        "version look-ups",
        f"{n + 3} version-less keys in 4 directories: {1 + calls['ListObjectVersions']} "
        f"ListObjectVersions calls (one per key before: {n + 3})",
    )
