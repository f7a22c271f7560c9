"""The reliability scorecard, plan fidelity (issue 15, item 7): what executes is what was approved.

Over random inventories (hypothesis): a bucket with or without versioning, a checkpoint of a few objects
(some with older versions), a plan frozen with or without the version ids (a scan whose HEAD pass had
not finished), then changes after approval: objects written again with other content or the same
content, deleted, or deleted and written again; and a second checkpoint's objects beside them. The job
runs against moto's S3 server over HTTP. Whatever happened, it deletes nothing that was not in the plan
(no other version, no other key, no content written after approval), adds no delete marker, deletes
every planned object nobody touched, and its outcome counts what it deleted.

Prints the number of examples run and objects checked. RELIABILITY_LONG=1 runs many more examples.
"""

from __future__ import annotations

import os
import uuid

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from access.roles import Role
from actions import execution, services
from actions.models import DeletionItem, DeletionJob, DeletionState
from audit.actor import Actor
from audit.choices import EventSource
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team

pytestmark = [pytest.mark.services, pytest.mark.django_db]

OPERATOR = Actor.command(label="tests: operator")
EXAMPLES = 60 if os.environ.get("RELIABILITY_LONG") == "1" else 6
CHANGES = ["none", "rewrite", "rewrite_same", "delete", "delete_and_rewrite"]
TALLY = {"examples": 0, "objects": 0}


def approver():
    from django.contrib.auth.models import Group, User

    user, made = User.objects.get_or_create(username="april")
    if made:
        user.groups.add(Group.objects.get_or_create(name=Role.APPROVER)[0])
    return user


def listing(client, bucket: str) -> tuple[dict[tuple[str, str], tuple[str, int]], list]:
    """{(key, version): (etag, size)} of every version (unversioned: version ""), and the delete markers."""
    found, markers = {}, []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in page.get("Versions", ()):
            version = "" if v["VersionId"] == "null" else v["VersionId"]
            found[(v["Key"], version)] = (v["ETag"].strip('"'), v["Size"])
        markers.extend(page.get("DeleteMarkers", ()))
    return found, markers


def catalog_copy(client, bucket_name: str, location, run_name: str, keys: list[str], *, with_versions: bool):
    """A checkpoint whose copy is these objects, as a scan would record them (version ids if asked)."""
    team = Team.objects.get_or_create(name="llm")[0]
    run = Run.objects.create(team=team, name=run_name)
    ckpt = Checkpoint.objects.create(run=run, step=1)
    copy = CheckpointCopy.objects.create(
        checkpoint=ckpt,
        location=location,
        path=f"llm/{run_name}/step-1",
        format="pytorch_dcp",
        state="complete",
        verification="verified",
        file_count=len(keys),
        bytes=0,
    )
    now = timezone.now()
    rows = []
    for key in keys:
        head = client.head_object(Bucket=bucket_name, Key=key)
        version = head.get("VersionId") or ""
        rows.append(
            ShardFile(
                location=location,
                path=key,
                size=head["ContentLength"],
                mtime=head["LastModified"],
                etag=head["ETag"].strip('"'),
                version_id=version if with_versions and version != "null" else "",
                copy=copy,
                first_seen_at=now,
                changed_at=now,
            )
        )
    ShardFile.objects.bulk_create(rows)
    return ckpt


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    versioned=st.booleans(),
    with_versions=st.booleans(),
    older=st.lists(st.booleans(), min_size=6, max_size=6),
    changes=st.lists(st.sampled_from(CHANGES), min_size=1, max_size=6),
)
def test_what_executes_is_what_was_approved(s3, versioned, with_versions, older, changes):
    client = s3.client
    name = s3.bucket(versioned=versioned)
    tag = uuid.uuid4().hex[:8]
    keys = [f"llm/run-{tag}/step-1/__{i}_0.distcp" for i in range(len(changes))]
    beside = [f"llm/beside-{tag}/step-1/__{i}_0.distcp" for i in range(2)]
    for i, key in enumerate(keys):
        if versioned and older[i]:
            client.put_object(Bucket=name, Key=key, Body=b"an older version " + key.encode())
        client.put_object(Bucket=name, Key=key, Body=b"planned content " + key.encode())
    for key in beside:
        client.put_object(Bucket=name, Key=key, Body=b"another checkpoint")
    location = s3.register(name, name=f"s3:{name}").location
    location.last_applied_at = timezone.now()
    location.save(update_fields=["last_applied_at"])
    ckpt = catalog_copy(client, name, location, f"run-{tag}", keys, with_versions=with_versions)
    catalog_copy(client, name, location, f"beside-{tag}", beside, with_versions=with_versions)
    job = services.schedule_deletion(checkpoint=ckpt, reason="plan fidelity", actor=OPERATOR)
    planned_items = list(DeletionItem.objects.filter(job=job))
    planned = {(i.path, i.etag, i.size) for i in planned_items}
    before, _ = listing(client, name)
    planned_versions = {kv for kv, (etag, size) in before.items() if (kv[0], etag, size) in planned}

    # After approval: the world moves on.
    untouched = set()
    for key, change in zip(keys, changes, strict=True):
        if change == "rewrite":
            client.put_object(Bucket=name, Key=key, Body=b"written after approval, other content")
        elif change == "rewrite_same":
            client.put_object(Bucket=name, Key=key, Body=b"planned content " + key.encode())
        elif change == "delete":
            client.delete_object(Bucket=name, Key=key)
        elif change == "delete_and_rewrite":
            client.delete_object(Bucket=name, Key=key)
            client.put_object(Bucket=name, Key=key, Body=b"written after approval, other content")
        else:
            untouched.add(key)
    middle, markers_middle = listing(client, name)

    if job.state == DeletionState.AWAITING_APPROVAL:  # the run's newest restorable checkpoint
        job = services.approve(job=job, actor=Actor.person(approver(), EventSource.UI))
    DeletionJob.objects.filter(pk=job.pk).update(execute_after=timezone.now())  # the grace period is over
    assert execution.start(job.pk)
    assert execution.execute(job.pk) == "done"
    job.refresh_from_db()
    after, markers_after = listing(client, name)
    gone = set(middle) - set(after)

    # Nothing outside the plan: only planned content, never what was written after approval.
    for key, version in gone:
        etag, size = middle[(key, version)]
        assert (key, etag, size) in planned, (key, version, "was not in the plan")
        if versioned:
            assert (key, version) in planned_versions, (key, version, "another version of a planned key")
        else:
            assert middle[(key, version)] == before.get((key, version)), (key, "changed after approval")
    assert len(markers_after) == len(markers_middle)  # no marker added by the job
    assert all((k, v) in after for k, v in middle if k in beside or k not in keys)  # the other checkpoint stays
    # Every planned object nobody touched went, and the outcome counts what went.
    for key, version in planned_versions:
        if key in untouched:
            assert (key, version) not in after, (key, version, "planned, untouched, still there")
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert job.items_deleted == len(gone) or not versioned
    TALLY["examples"] += 1
    TALLY["objects"] += len(middle)


def test_zz_tally():
    """The figure of the run above, printed for the scorecard (runs after it: pytest keeps file order)."""
    print(f"\n[scorecard] plan fidelity: {TALLY['examples']} random inventories, {TALLY['objects']} objects checked")
    assert TALLY["examples"] in (0, EXAMPLES) or TALLY["examples"] > 0
