"""A checkpoint copy in a bucket on moto's S3 server, recorded in the catalog as a scan would have."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime

import pytest
import time_machine
from django.contrib.auth.models import Group

from access.roles import Role
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.choices import CopyState, Verification
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team

WHEN = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
# The kit's world runs an hour after its files were written, whatever the real date: the product's rules for "now"
# (a price cannot take effect in a closed month, an object's age) read this clock, never the calendar's.
NOW = datetime(2026, 11, 20, 13, 0, tzinfo=UTC)


class Kit:
    """Buckets, one checkpoint with its copy, and the people who act on it."""

    def __init__(self, s3, django_user_model) -> None:
        self.s3 = s3
        self.source_name = s3.bucket()
        self.source = s3.register(self.source_name, name="src")
        self.team, _ = Team.objects.get_or_create(name="llm")
        self.run, _ = Run.objects.get_or_create(team=self.team, name="llama")
        operators = Group.objects.get_or_create(name=Role.OPERATOR)[0]
        self.operator = django_user_model.objects.create_user(username="olga", password="x-long-password-1")
        self.operator.groups.add(operators)
        self.viewer = django_user_model.objects.create_user(username="vic", password="x-long-password-1")
        self.viewer.groups.add(Group.objects.get_or_create(name=Role.VIEWER)[0])
        self.actor = Actor(kind="user", label="olga", source="api", user=self.operator)

    def bucket(self, name: str = "", **kwargs):
        name = name or self.s3.bucket()
        return self.s3.register(name, name=f"loc-{name}", **kwargs)

    def checkpoint(self, step: int, files: dict[str, tuple[bytes, str]], *, bucket=None, state=CopyState.COMPLETE):
        """A checkpoint whose copy at ``bucket`` (the source bucket) holds ``files``: {name: (body, class)}."""
        bucket = bucket or self.source
        checkpoint = Checkpoint.objects.create(run=self.run, step=step)
        path = f"llm/llama/step-{step}"
        copy = CheckpointCopy.objects.create(
            checkpoint=checkpoint,
            location=bucket.location,
            path=path,
            format="pytorch_dcp",
            state=state,
            verification=Verification.VERIFIED,
            file_count=len(files),
            bytes=sum(len(b) for b, _ in files.values()),
        )
        for name, (body, storage_class) in files.items():
            key = f"{bucket.prefix}{path}/{name}"
            answer = self.s3.client.put_object(
                Bucket=bucket.bucket_name, Key=key, Body=body, StorageClass=storage_class
            )
            ShardFile.objects.create(
                location=bucket.location,
                path=f"{path}/{name}",
                size=len(body),
                mtime=WHEN,
                storage_class=storage_class,
                tier=bucket.tier_of(storage_class),
                etag=answer["ETag"].strip('"'),
                copy=copy,
                first_seen_at=WHEN,
                changed_at=WHEN,
            )
        return checkpoint, copy

    def body(self, bucket: str, key: str) -> bytes:
        return self.s3.client.get_object(Bucket=bucket, Key=key)["Body"].read()

    def head(self, bucket: str, key: str) -> dict:
        return self.s3.client.head_object(Bucket=bucket, Key=key)

    def restores_take(self, polls: int) -> None:
        """Make moto's restores report ongoing-request="true" for about ``polls`` reads of an object.

        moto moves a restore on by one state every ``polls`` reads of the key (none -> in progress ->
        restored); 0 puts back the default, where a restore is done at once.
        """
        transition = {"progression": "manual", "times": polls} if polls else {"progression": "immediate"}
        body = json.dumps({"model_name": "s3::keyrestore", "transition": transition}).encode()
        request = urllib.request.Request(
            f"{self.s3.url}/moto-api/state-manager/set-transition", data=body, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()


@pytest.fixture
def kit(s3, django_user_model, db):
    with time_machine.travel(NOW, tick=True):
        kit = Kit(s3, django_user_model)
        yield kit
        kit.restores_take(0)


def events(action: str, **filters) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action, **filters).order_by("id"))


@pytest.fixture
def scanned(kit, scan_now):
    """The nvme-a tree below fleet/ in the source bucket (with SHA256 checksums), scanned into the catalog."""
    name = kit.s3.bucket()
    kit.s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = kit.s3.register(name, name="hot", prefix="fleet/")
    inventory = scan_now(bucket)
    assert inventory.status == "applied", inventory.error
    return bucket


def step(n: int) -> Checkpoint:
    """A checkpoint of the nvme-a tree's llama-tiny run."""
    return Checkpoint.objects.get(run__name="llama-tiny", step=n)
