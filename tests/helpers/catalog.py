"""Catalog data built with the ORM as the ingest would leave it: a location, a run, a copy with its files."""

from __future__ import annotations

from catalog.choices import CopyState, Importance
from catalog.models import Checkpoint, CheckpointCopy, Run
from fleet.models import StorageLocation
from tests.factories import CheckpointCopyFactory, HostFactory, RunFactory, StorageLocationFactory, TeamFactory


def make_location(name: str = "gpu-a01") -> StorageLocation:
    """The NVMe root /mnt/nvme0/checkpoints of host ``name`` (made if new)."""
    return StorageLocationFactory(host=HostFactory(name=name), root_path="/mnt/nvme0/checkpoints")


def make_run(team: str = "vision", name: str = "vit-huge") -> Run:
    return RunFactory(team=TeamFactory(name=team), name=name)


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
    """An unverified copy of ``run``'s step (made if new) at ``location``, with its ``files`` shard files."""
    checkpoint, _ = Checkpoint.objects.get_or_create(run=run, step=step, defaults={"importance": Importance.ROUTINE})
    return CheckpointCopyFactory(
        checkpoint=checkpoint,
        location=location,
        state=state,
        reasons=reasons or [],
        files=files,
        size=size,
        expected_files=expected_files,
        expected_bytes=expected_bytes,
        shards=True,
    )
