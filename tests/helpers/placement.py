"""A small fleet for placement tests: hosts, buckets, runs, checkpoints and copies with their tier usage.

Built with the ORM as the ingest and the rollup refresh leave them.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from catalog.choices import CopyState, Importance, RunStatus, Verification
from catalog.models import Checkpoint, CheckpointCopy, CopyTierUsage, Run
from fleet.models import StorageLocation
from tests.factories import (
    CheckpointCopyFactory,
    CheckpointFactory,
    HostFactory,
    RunFactory,
    StorageLocationFactory,
    TeamFactory,
)

DAY = timedelta(days=1)


def host_location(host: str, *, drive: str = "nvme0", site: str = "dc1", region: str = "eu-west") -> StorageLocation:
    return StorageLocationFactory(host=HostFactory(name=host, site=site, region=region), root_path=f"/mnt/{drive}")


def bucket(name: str, region: str = "us-east") -> StorageLocation:
    return StorageLocationFactory(bucket=True, name=f"s3://{name}", region=region)


def make_run(name: str = "llama-70b", *, status: str = RunStatus.ACTIVE, team: str = "llm") -> Run:
    return RunFactory(team=TeamFactory(name=team), name=name, status=status)


def checkpoint(run: Run, step: int | None, importance: str = Importance.ROUTINE, *, tag: str = "", age_days: int = 0):
    ck = CheckpointFactory(run=run, step=step, tag=tag, importance=importance)
    if age_days:
        Checkpoint.objects.filter(pk=ck.pk).update(first_seen_at=timezone.now() - age_days * DAY)
    return ck


def copy(
    ck: Checkpoint,
    location: StorageLocation,
    *,
    state: str = CopyState.COMPLETE,
    verification: str = Verification.VERIFIED,
    classes: dict[str, str] | None = None,
    temporary: bool = False,
    size: int = 4096,
) -> CheckpointCopy:
    """A present copy; ``classes`` {storage class: tier} of a bucket copy's bytes (CopyTierUsage rows)."""
    c = CheckpointCopyFactory(
        checkpoint=ck,
        location=location,
        path=f"{ck.run.name}/{ck.label}/{location.pk}-{CheckpointCopy.objects.count()}",
        format="pytorch_dcp",
        state=state,
        verification=verification,
        temporary=temporary,
        file_count=2,
        bytes=size,
    )
    shares = classes or {"": location.tier}
    for storage_class, tier in shares.items():
        CopyTierUsage.objects.create(
            copy=c, location=location, tier=tier, storage_class=storage_class, bytes=size // len(shares), files=1
        )
    return c
