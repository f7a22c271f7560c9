"""Usage from the outside: DCP inventories pushed through the API at a chosen moment, and flat prices.

Also the check that every monthly rollup row is the sum of its daily rows.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

from django.utils import timezone

from audit.actor import Actor
from fleet.models import PricePoint
from fleet.services import gzip_lines, host_register, host_token_issue, location_add
from spend.models import UsageDaily, UsageMonthly
from tests.conftest import HostKit

GIB = 1024**3


URL = "/api/v1/inventories/"


def dcp(team: str, run: str, step: int, shard: int, *, ranks: int = 2, missing: int | None = None) -> list[dict]:
    """The files of a DCP checkpoint: ``.metadata`` (with the facts the agent reads) and one shard per rank."""
    base = f"{team}/{run}/step-{step}"
    names = {f"__{r}_0.distcp": shard for r in range(ranks)}
    files = [
        {
            "path": f"{base}/.metadata",
            "size": 900,
            "mtime": 1790000000.0 + step,
            "facts": {"kind": "dcp_metadata", "files": names},
        }
    ]
    files += [
        {"path": f"{base}/__{r}_0.distcp", "size": shard, "mtime": 1789999990.0 + step}
        for r in range(ranks)
        if r != missing
    ]
    return files


def checkpoint_bytes(shard: int, ranks: int = 2) -> int:
    return 900 + ranks * shard


def root_kit(name: str, root: str, *, kind: str, tier: str) -> HostKit:
    """A registered host with one root of any kind, as ``make_host`` makes an NVMe one."""
    actor = Actor.command(label="tests")
    kit = HostKit.__new__(HostKit)
    kit.host = host_register(name=name, site="dc1", region="eu-west", actor=actor)
    kit.location = location_add(host=kit.host, name=f"{name}:{root}", kind=kind, tier=tier, root_path=root, actor=actor)
    kit.token = host_token_issue(host=kit.host, actor=actor)
    kit.root = kit.location.root_path
    return kit


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


class Fleet:
    """Pushes inventories through the API at a chosen moment, as hosts would, and lets ingestion run."""

    def __init__(self, client, monkeypatch, capture) -> None:
        self.client = client
        self.monkeypatch = monkeypatch
        self.capture = capture

    def at(self, when: datetime) -> None:
        self.monkeypatch.setattr(timezone, "now", lambda: when)

    def push(self, kit: HostKit, files: list[dict], *, at: datetime, allow_empty: bool = False) -> None:
        self.at(at)
        lines = kit.lines(files)
        if allow_empty:
            lines[0]["allow_empty"] = True
        with self.capture(execute=True):
            response = self.client.post(
                URL,
                data=gzip_lines(lines),
                content_type="application/x-ndjson",
                HTTP_CONTENT_ENCODING="gzip",
                **kit.auth(),
            )
        assert response.status_code == 202, response.content
        status = self.client.get(response.json()["url"], **kit.auth()).json()
        assert status["status"] == "applied", status


def flat_prices(**per_tier: str) -> None:
    """Prices of one's own (kind-specific, so they win over the shipped defaults of any kind)."""
    for tier, price in per_tier.items():
        PricePoint.objects.create(
            kind=tier if tier in ("nvme", "pfs") else "bucket",
            tier=tier,
            price_per_gib_month=Decimal(price),
            entered_price=Decimal(price),
            effective_from=date(2000, 1, 1),
            source="tests",
        )


def assert_monthly_is_the_sum_of_the_daily_rows() -> int:
    """Every ``UsageMonthly`` row equals its month's ``UsageDaily`` rows summed in Python, and nothing else is
    there; returns the months compared."""
    want: dict[tuple, list] = {}
    for r in UsageDaily.objects.values():
        key = (
            r["day"].replace(day=1),
            r["location_id"],
            r["team_id"],
            r["run_id"],
            r["run_status"],
            r["tier"],
            r["storage_class"],
            r["state"],
        )
        sums = want.setdefault(key, [0, 0, 0, None, 0])
        sums[0] += 1
        sums[4] += int(r["estimated"])
        sums[1] += r["bytes"]
        sums[2] += r["files"]
        if r["cost_nanos"] is not None:
            sums[3] = (sums[3] or 0) + r["cost_nanos"]
    got = {
        (r.month, r.location_id, r.team_id, r.run_id, r.run_status, r.tier, r.storage_class, r.state): [
            r.days,
            r.byte_days,
            r.file_days,
            r.cost_nanos,
            r.estimated_days,
        ]
        for r in UsageMonthly.objects.all()
    }
    assert got == want
    assert UsageMonthly.objects.count() == len(want)
    return len({k[0] for k in want})
