"""A small fleet for placement tests: hosts, buckets, runs, checkpoints and copies with their tier usage.

Built with the ORM as the ingest and the rollup refresh leave them.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from catalog.choices import CopyState, Importance, RunStatus, Verification
from catalog.models import Checkpoint, CheckpointCopy, CopyTierUsage, Run, Team
from fleet.models import Host, StorageLocation

DAY = timedelta(days=1)


def host_location(host: str, *, drive: str = "nvme0", site: str = "dc1", region: str = "eu-west") -> StorageLocation:
    h, _ = Host.objects.get_or_create(name=host, defaults={"site": site, "region": region})
    return StorageLocation.objects.create(
        name=f"{host}:/mnt/{drive}", kind="nvme", tier="nvme", host=h, root_path=f"/mnt/{drive}"
    )


def bucket(name: str, region: str = "us-east") -> StorageLocation:
    return StorageLocation.objects.create(name=f"s3://{name}", kind="bucket", tier="object_standard", region=region)


def make_run(name: str = "llama-70b", *, status: str = RunStatus.ACTIVE, team: str = "llm") -> Run:
    team_obj, _ = Team.objects.get_or_create(name=team)
    return Run.objects.create(team=team_obj, name=name, status=status)


def checkpoint(run: Run, step: int | None, importance: str = Importance.ROUTINE, *, tag: str = "", age_days: int = 0):
    ck = Checkpoint.objects.create(run=run, step=step, tag=tag, importance=importance)
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
    c = CheckpointCopy.objects.create(
        checkpoint=ck,
        location=location,
        path=f"{ck.run.name}/{ck.label}/{location.pk}-{CheckpointCopy.objects.count()}",
        format="dcp",
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
