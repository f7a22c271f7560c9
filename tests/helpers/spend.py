"""The spend tests' small fleet: two roots pushed day by day from Jan 1 to Feb 10 2027.

The expected spend is worked out from the list of events alone, with plain Decimal arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal

from fleet.models import PricePoint
from spend import report as spend
from tests.conftest import HostKit
from tests.helpers.usage import (
    GIB,
    checkpoint_bytes,
    dcp,
    utc,
)

CENT = Decimal("0.01")


# Shard sizes: two ranks each; odd byte counts so that nothing lands on a round number.
A100 = 5 * GIB + 777  # llm/alpha step 100, NVMe, deleted on Jan 20


B10 = 3 * GIB + GIB // 2 + 123  # llm/beta step 10, NVMe, deleted on Feb 10 ("today")


A200 = 6 * GIB + 55  # llm/alpha step 200, NVMe, written on Jan 5 at 23:30 UTC


G1 = 40 * GIB + 9  # vision/gamma step 1, PFS, deleted at 00:00:30 UTC on Feb 1


A50 = 20 * GIB + 1  # llm/alpha step 50, PFS, kept


RUN_TEAM = {"alpha": "llm", "beta": "llm", "gamma": "vision"}


COST_CENTERS = {"llm": "CC-100 Foundation models", "vision": "CC-200 Perception"}


def files(*checkpoints: tuple[str, int, int]) -> list[dict]:
    out: list[dict] = []
    for run, step, shard in checkpoints:
        out += dcp(RUN_TEAM[run], run, step, shard)
    return out


def nvme_state(day: date) -> list[tuple[str, int]]:
    """What the NVMe root holds at the end of ``day``, from the events alone."""
    if day < date(2027, 1, 1):
        return []
    held = [("alpha", A100), ("beta", B10)]
    if day >= date(2027, 1, 5):
        held.append(("alpha", A200))
    if day >= date(2027, 1, 20):
        held.remove(("alpha", A100))
    if day >= date(2027, 2, 10):
        held.remove(("beta", B10))
    return held


def pfs_state(day: date) -> list[tuple[str, int]]:
    if day < date(2027, 1, 1):
        return []
    held = [("alpha", A50)]
    if day < date(2027, 2, 1):
        held.append(("gamma", G1))
    return held


def nvme_price(day: date) -> Decimal:
    return Decimal("0.10") if day < date(2027, 1, 16) else Decimal("0.16")


def pfs_price(day: date) -> Decimal:
    return Decimal("0.03") if day < date(2027, 3, 15) else Decimal("0.05")


def days_in_month(day: date) -> int:
    following = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
    return (following - day.replace(day=1)).days


def expected(first: date, last: date, *, group=lambda run, tier: "all") -> dict[str, Decimal]:
    """Spend over [first, last], exact, grouped by ``group(run, tier)``."""
    out: dict[str, Decimal] = {}
    day = first
    while day <= last:
        for state, price, tier in ((nvme_state, nvme_price, "nvme"), (pfs_state, pfs_price, "pfs")):
            for run, shard in state(day):
                cost = Decimal(checkpoint_bytes(shard)) * price(day) / GIB / days_in_month(day)
                key = group(run, tier)
                out[key] = out.get(key, Decimal(0)) + cost
        day += timedelta(days=1)
    return out


def by_team(run: str, tier: str) -> str:
    return RUN_TEAM[run]


def by_tier(run: str, tier: str) -> str:
    return tier


def by_cost_center(run: str, tier: str) -> str:
    return COST_CENTERS[RUN_TEAM[run]]


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


@dataclass
class Scenario:
    nvme: HostKit
    pfs: HostKit
    delete_today: Callable[[], None]


JANUARY = spend.Period.month(2027, 1)


FEBRUARY = spend.Period.month(2027, 2)


TODAY = date(2027, 2, 10)


def fleet_of(fleet, make_host, runs: int) -> None:
    PricePoint.objects.create(
        kind="nvme",
        tier="nvme",
        price_per_gib_month=Decimal("0.1"),
        entered_price=Decimal("0.1"),
        effective_from=date(2000, 1, 1),
    )
    kit = make_host(f"gpu-{runs}", f"/mnt/nvme{runs}")
    out: list[dict] = []
    for i in range(runs):
        out += dcp(f"team{i % 3}", f"run{i}", 1, 1000 + i)
    fleet.push(kit, out, at=utc(2027, 1, 2, 12))
    fleet.push(kit, out[: len(out) // 2], at=utc(2027, 2, 5, 12))


def fleet_of_more(fleet, make_host) -> None:
    kit = make_host("gpu-many", "/mnt/many")
    out: list[dict] = []
    for i in range(25):
        out += dcp(f"crew{i % 4}", f"big{i}", 1, 5000 + i)
    fleet.push(kit, out, at=utc(2027, 1, 20, 12))
    fleet.push(kit, out[:10], at=utc(2027, 2, 7, 12))
