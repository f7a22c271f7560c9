"""A small fleet for the retention tests, built row by row so that every byte and price is known.

Prices are set per location (the narrowest scope), so the tests do not depend on the default book.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from actions.models import DeletionJob, DeletionState, Hold, Pin
from catalog.models import Checkpoint, CheckpointCopy, CopyTierUsage, Run, ShardFile, Team
from fleet.models import Host, PricePoint, StorageLocation

GIB = 1024**3
SINCE = date(2000, 1, 2)
NOW = timezone.now


class Fleet:
    def __init__(self) -> None:
        self.team = Team.objects.create(name="llm", cost_center="CC-100")
        self.host = Host.objects.create(name="gpu-a01", site="dc1", region="eu-west")
        # Both as if an inventory had just been applied: a policy acts only on fresh evidence (promise 12).
        self.nvme = StorageLocation.objects.create(
            name="gpu-a01:/nvme", kind="nvme", tier="nvme", host=self.host, root_path="/nvme", last_applied_at=NOW()
        )
        self.bucket = StorageLocation.objects.create(
            name="s3:ckpts", kind="bucket", tier="object_standard", last_applied_at=NOW()
        )

    def price(self, location, tier: str, price: str, storage_class: str = "", *, kind: str = "") -> None:
        PricePoint.objects.create(
            location=location,
            kind=kind if location is None else location.kind,
            tier=tier,
            storage_class=storage_class,
            price_per_gib_month=Decimal(price),
            entered_price=Decimal(price),
            basis="gib_month",
            currency="USD",
            effective_from=SINCE,
            source="tests",
        )

    def run(self, name: str, status: str = "finished", team: Team | None = None) -> Run:
        return Run.objects.create(team=team or self.team, name=name, status=status)

    def checkpoint(self, run: Run, step: int | None, *, importance: str = "routine", tag: str = "") -> Checkpoint:
        return Checkpoint.objects.create(run=run, step=step, tag=tag, importance=importance)

    def copy(
        self,
        checkpoint: Checkpoint,
        location: StorageLocation,
        size: int,
        *,
        files: int = 2,
        tier: str | None = None,
        storage_class: str = "",
        verified: bool = True,
        state: str = "complete",
        age_days: int = 0,
    ) -> CheckpointCopy:
        now = timezone.now()
        written = datetime.combine(now.astimezone(UTC).date() - timedelta(days=age_days), datetime.min.time(), UTC)
        written += timedelta(hours=12)
        path = f"{checkpoint.run.team.name}/{checkpoint.run.name}/{checkpoint.label.replace(' ', '_')}"
        copy = CheckpointCopy.objects.create(
            checkpoint=checkpoint,
            location=location,
            path=path,
            format="pytorch_dcp",
            state=state,
            verification="verified" if verified else "unverified",
            file_count=files,
            bytes=size,
            newest_mtime=written,
        )
        CopyTierUsage.objects.create(
            copy=copy,
            location=location,
            tier=tier or location.tier,
            storage_class=storage_class,
            bytes=size,
            files=files,
        )
        share, rest = divmod(size, files)
        ShardFile.objects.bulk_create(
            ShardFile(
                location=location,
                path=f"{path}/__{i}_0.distcp",
                size=share + (rest if i == 0 else 0),
                mtime=written,
                storage_class=storage_class,
                copy=copy,
                first_seen_at=now,
                changed_at=now,
            )
            for i in range(files)
        )
        return copy

    def pin(self, checkpoint: Checkpoint) -> Pin:
        return Pin.objects.create(checkpoint=checkpoint, reason="tests", pinned_label="ops", pinned_at=timezone.now())

    def hold(self, run: Run, checkpoint: Checkpoint | None = None) -> Hold:
        return Hold.objects.create(
            run=run,
            checkpoint=checkpoint,
            reason="litigation",
            case_ref="CASE-1",
            placed_label="legal",
            placed_at=timezone.now(),
        )

    def scheduled(self, checkpoint: Checkpoint) -> DeletionJob:
        now = timezone.now()
        return DeletionJob.objects.create(
            checkpoint=checkpoint,
            state=DeletionState.SCHEDULED,
            reason="tests",
            requested_label="ops",
            requested_at=now,
            execute_after=now + timedelta(days=7),
        )


def alpha(fleet: Fleet) -> dict[int, Checkpoint]:
    """Run llm/alpha, finished: steps 100-600 on NVMe, 10 GiB each; step 400 also 4 GiB in a bucket (STANDARD_IA).

    Step 600 is complete but unverified, so the newest restorable checkpoint is step 500 (verified
    first). 100 is critical, 200 a milestone, 300 pinned. NVMe costs 0.10 USD and STANDARD_IA 0.02
    USD per GiB-month here.
    """
    fleet.price(fleet.nvme, "nvme", "0.10")
    fleet.price(fleet.bucket, "object_infrequent", "0.02")
    run = fleet.run("alpha")
    importance = {100: "critical", 200: "milestone"}
    steps = {}
    for step in (100, 200, 300, 400, 500, 600):
        c = fleet.checkpoint(run, step, importance=importance.get(step, "routine"))
        fleet.copy(c, fleet.nvme, 10 * GIB, verified=step != 600)
        steps[step] = c
    fleet.copy(steps[400], fleet.bucket, 4 * GIB, tier="object_infrequent", storage_class="STANDARD_IA")
    fleet.pin(steps[300])
    return steps
