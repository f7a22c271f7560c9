"""Personas and a small fleet for the action tests: a run with checkpoints, copies and their files.

Also ``scanned``: a versioned bucket on moto's S3 server holding the nvme-a tree, scanned.

Personas: olga and oscar (operators), april (approver), adam (admin), vic (viewer only).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Group, User
from django.utils import timezone

from access.roles import Role
from audit.actor import Actor
from audit.choices import EventSource
from audit.models import AuditEvent
from catalog.choices import CopyState, Importance, Verification
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
from fleet.models import Host, StorageLocation


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
    run = checkpoint.run
    path = f"{run.team.name}/{run.name}/checkpoint-{checkpoint.step}"
    copy = CheckpointCopy.objects.create(
        checkpoint=checkpoint,
        location=location,
        path=path,
        format="hf-trainer",
        state=state,
        verification=verification,
        file_count=files,
        bytes=files * size,
    )
    now = timezone.now()
    ShardFile.objects.bulk_create(
        ShardFile(
            location=location,
            path=f"{path}/model-{i:05d}.safetensors",
            size=size,
            mtime=now,
            copy=copy,
            first_seen_at=now,
            changed_at=now,
            etag=f"etag{i}",
        )
        for i in range(files)
    )
    return copy


def build_fleet(steps=(100, 200, 300)) -> Fleet:
    team, _ = Team.objects.get_or_create(name="vision")
    run = Run.objects.create(team=team, name="vit-huge")
    host, _ = Host.objects.get_or_create(name="gpu-a01", defaults={"site": "dc1", "region": "eu-west"})
    nvme = StorageLocation.objects.create(
        name="gpu-a01:/mnt/nvme0", kind="nvme", tier="nvme", host=host, root_path="/mnt/nvme0"
    )
    pfs = StorageLocation.objects.create(name="gpu-a01:/lustre", kind="pfs", tier="pfs", host=host, root_path="/lustre")
    checkpoints = {}
    for step in steps:
        checkpoints[step] = Checkpoint.objects.create(run=run, step=step, importance=Importance.ROUTINE)
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
