"""Catalog data built with the ORM as the ingest would leave it: a location, a run, a copy with its files."""

from __future__ import annotations

from django.utils import timezone

from catalog.choices import CopyState, Importance, Verification
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
from fleet.models import Host, StorageLocation


def make_location(name: str = "gpu-a01") -> StorageLocation:
    host, _ = Host.objects.get_or_create(name=name, defaults={"site": "dc1", "region": "eu-west"})
    return StorageLocation.objects.create(
        name=f"{name}:/mnt/nvme0/checkpoints",
        kind="nvme",
        tier="nvme",
        host=host,
        root_path="/mnt/nvme0/checkpoints",
    )


def make_run(team: str = "vision", name: str = "vit-huge") -> Run:
    team_obj, _ = Team.objects.get_or_create(name=team)
    return Run.objects.create(team=team_obj, name=name)


def make_copy(
    run: Run,
    step: int,
    location: StorageLocation,
    *,
    state: str = CopyState.COMPLETE,
    reasons: list[str] | None = None,
    files: int = 2,
    size: int = 1536,
    expected_files: int | None = None,
    expected_bytes: int | None = None,
) -> CheckpointCopy:
    checkpoint, _ = Checkpoint.objects.get_or_create(run=run, step=step, defaults={"importance": Importance.ROUTINE})
    path = f"{run.team.name}/{run.name}/checkpoint-{step}"
    copy = CheckpointCopy.objects.create(
        checkpoint=checkpoint,
        location=location,
        path=path,
        format="hf-trainer",
        state=state,
        reasons=reasons or [],
        file_count=files,
        bytes=files * size,
        expected_files=expected_files,
        expected_bytes=expected_bytes,
        verification=Verification.UNVERIFIED,
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
        )
        for i in range(files)
    )
    return copy
