"""Personas and a small fleet for the action tests: a run with checkpoints, copies and their files.

Also ``scanned``: a versioned bucket on moto's S3 server holding the nvme-a tree, scanned.

Personas: olga and oscar (operators), april (approver), adam (admin), vic (viewer only).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Group, User

from access.roles import Role
from audit.actor import Actor
from audit.choices import EventSource
from audit.models import AuditEvent
from catalog.choices import CopyState, Verification
from catalog.models import Checkpoint, CheckpointCopy, Run
from fleet.models import StorageLocation
from tests.factories import (
    CheckpointCopyFactory,
    CheckpointFactory,
    HostFactory,
    RunFactory,
    StorageLocationFactory,
    TeamFactory,
)


def make_person(username: str, *roles: str) -> User:
    user = User.objects.create_user(username=username, password="a-long-password-1")
    for role in roles:
        group, _ = Group.objects.get_or_create(name=role)
        user.groups.add(group)
    return user


@dataclass
class Fleet:
    run: Run
    nvme: StorageLocation
    pfs: StorageLocation
    checkpoints: dict[int, Checkpoint]

    def copy(self, step: int, location: StorageLocation) -> CheckpointCopy:
        return CheckpointCopy.objects.get(checkpoint=self.checkpoints[step], location=location)


def add_copy(
    checkpoint: Checkpoint,
    location: StorageLocation,
    *,
    files: int = 3,
    size: int = 1024,
    state: str = CopyState.COMPLETE,
    verification: str = Verification.VERIFIED,
) -> CheckpointCopy:
    """A verified, complete copy of ``checkpoint`` at ``location`` with its ``files`` shard files."""
    return CheckpointCopyFactory(
        checkpoint=checkpoint,
        location=location,
        files=files,
        size=size,
        state=state,
        verification=verification,
        shards=True,
    )


def build_fleet(steps=(100, 200, 300)) -> Fleet:
    """vision/vit-huge on gpu-a01, with each step's copy on its NVMe and on its Lustre root."""
    run = RunFactory(team=TeamFactory(name="vision"), name="vit-huge")
    host = HostFactory(name="gpu-a01")
    nvme = StorageLocationFactory(host=host, root_path="/mnt/nvme0")
    pfs = StorageLocationFactory(host=host, kind="pfs", tier="pfs", root_path="/lustre")
    checkpoints = {}
    for step in steps:
        checkpoints[step] = CheckpointFactory(run=run, step=step)
        add_copy(checkpoints[step], nvme)
        add_copy(checkpoints[step], pfs)
    return Fleet(run=run, nvme=nvme, pfs=pfs, checkpoints=checkpoints)


@pytest.fixture
def fleet(db) -> Fleet:
    return build_fleet()


@pytest.fixture
def olga(db) -> User:
    return make_person("olga", Role.OPERATOR)


@pytest.fixture
def oscar(db) -> User:
    return make_person("oscar", Role.OPERATOR)


@pytest.fixture
def april(db) -> User:
    return make_person("april", Role.APPROVER)


@pytest.fixture
def adam(db) -> User:
    return make_person("adam", Role.ADMIN)


@pytest.fixture
def vic(db) -> User:
    return make_person("vic", Role.VIEWER)


def as_ui(user: User):
    return Actor.person(user, EventSource.UI)


def events() -> int:
    return AuditEvent.objects.count()


@pytest.fixture
def scanned(s3, scan_now):
    """A versioned bucket holding the nvme-a tree below fleet/, scanned; one key has an older version too."""
    name = s3.bucket(versioned=True)
    s3.put(name, "fleet/llm/llama-tiny/step-100/__0_0.distcp", b"an older version of the shard")
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    s3.put(name, "unrelated/notes.txt", b"not a checkpoint")
    bucket = s3.register(name, prefix="fleet/")
    inventory = scan_now(bucket)
    assert inventory.status == "applied", inventory.error
    return name, bucket


ORPHANED_SCRATCH = {"fleet/scratch/dump-1.bin": b"x" * 3000, "fleet/scratch/dump-2.bin": b"y" * 5000}


@pytest.fixture
def orphaned(s3, scan_now):
    """A versioned bucket with checkpoints below fleet/, two stray objects in fleet/scratch/, a stray note beside a
    run's checkpoints, and an upload of fleet/scratch/big.bin started (one part sent) and never completed."""
    name = s3.bucket(versioned=True)
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    for key, body in ORPHANED_SCRATCH.items():
        s3.put(name, key, body)
    s3.put(name, "fleet/llm/llama-tiny/notes.txt", b"what we tried")
    upload = s3.client.create_multipart_upload(Bucket=name, Key="fleet/scratch/big.bin")
    s3.client.upload_part(
        Bucket=name, Key="fleet/scratch/big.bin", UploadId=upload["UploadId"], PartNumber=1, Body=b"p" * 1024
    )
    bucket = s3.register(name, prefix="fleet/")
    inventory = scan_now(bucket)
    assert inventory.status == "applied", inventory.error
    return name, bucket, upload["UploadId"]
