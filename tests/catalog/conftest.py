"""Catalog-wide fixtures: the usage fleet (inventories pushed at a chosen moment) and the spend scenario.

The spend scenario's numbers and the expected spend live in tests.helpers.spend; these fixtures only
build it and sign finance in.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
import time_machine

from audit.actor import Actor
from catalog.models import Team
from fleet.models import PricePoint
from spend.prices import price_set
from spend.usage import usage_carry_forward_all
from tests.conftest import give_roles
from tests.helpers.recovery import NOW as RECOVERY_NOW
from tests.helpers.spend import A50, A100, A200, B10, COST_CENTERS, G1, Scenario, files
from tests.helpers.usage import Fleet, root_kit, utc


@pytest.fixture
def recovery_clock():
    """The recovery tests' instant (``tests.helpers.recovery.NOW``), standing still: every surface is asked at once."""
    with time_machine.travel(RECOVERY_NOW, tick=False):
        yield


@pytest.fixture
def fleet(client, monkeypatch, django_capture_on_commit_callbacks) -> Fleet:
    return Fleet(client, monkeypatch, django_capture_on_commit_callbacks)


@pytest.fixture
def scenario(make_host, fleet, settings) -> Scenario:
    """The small fleet, pushed day by day up to Feb 10; ``delete_today`` then deletes beta from NVMe."""
    settings.TIME_ZONE = "America/Los_Angeles"  # UTC-8: pages and rollups must still count UTC days
    nvme = make_host("gpu-a01", "/mnt/nvme0/checkpoints")
    pfs = root_kit("lustre-gw1", "/lustre/ckpt", kind="pfs", tier="pfs")
    for kind, price in (("nvme", "0.10"), ("pfs", "0.03")):
        PricePoint.objects.create(
            kind=kind,
            tier=kind,
            price_per_gib_month=Decimal(price),
            entered_price=Decimal(price),
            effective_from=date(2000, 1, 1),
            source="tests",
        )
    actor = Actor.command(label="finance")

    fleet.push(nvme, files(("alpha", 100, A100), ("beta", 10, B10)), at=utc(2027, 1, 1, 10))
    fleet.push(pfs, files(("gamma", 1, G1), ("alpha", 50, A50)), at=utc(2027, 1, 1, 10, 5))
    for team, cost_center in COST_CENTERS.items():
        Team.objects.filter(name=team).update(cost_center=cost_center)
    # 23:30 UTC on Jan 5 is already Jan 6 in UTC+14, still Jan 5 in Los Angeles: the UTC day counts.
    fleet.push(nvme, files(("alpha", 100, A100), ("beta", 10, B10), ("alpha", 200, A200)), at=utc(2027, 1, 5, 23, 30))
    fleet.at(utc(2027, 1, 10, 9))
    price_set(tier="nvme", kind="nvme", price="0.16", effective_from=date(2027, 1, 16), actor=actor, source="renewal")
    fleet.at(utc(2027, 1, 12, 0, 30))
    usage_carry_forward_all()  # beat, on Jan 12
    fleet.push(nvme, files(("beta", 10, B10), ("alpha", 200, A200)), at=utc(2027, 1, 20, 8))
    fleet.push(nvme, files(("beta", 10, B10), ("alpha", 200, A200)), at=utc(2027, 1, 31, 23, 59, 30))
    fleet.push(pfs, files(("alpha", 50, A50)), at=utc(2027, 2, 1, 0, 0, 30))
    fleet.at(utc(2027, 2, 10, 0, 30))
    usage_carry_forward_all()  # beat, on Feb 10

    def delete_today() -> None:
        fleet.push(nvme, files(("alpha", 200, A200)), at=utc(2027, 2, 10, 13))
        price_set(
            tier="pfs", kind="pfs", price="0.05", effective_from=date(2027, 3, 15), actor=actor, source="new contract"
        )

    return Scenario(nvme=nvme, pfs=pfs, delete_today=delete_today)


@pytest.fixture
def sign_in(client, django_user_model):
    """Signs a person in at the current (test) time, so that the session is valid then."""
    user = django_user_model.objects.create_user(username="fin", password="a-long-password-1")
    give_roles(user, "finance")

    def sign_in():
        client.force_login(user)
        return client

    return sign_in


@pytest.fixture
def finance(fleet, sign_in):
    fleet.at(utc(2027, 2, 10, 15))
    return sign_in()
