"""The test clock: ``pytest --clock=2026-12-31T23:59:30Z`` runs every selected test at that instant.

Time is an input. The product reads "now" through ``django.utils.timezone.now()`` (and ``fleet.pricebook.utc_today()``
on top of it), and time-machine moves that clock in this process; so no seam of our own is needed. Each test starts
at the instant given (``tick=True``: the clock runs on from there), its fixtures included, so a test that would break
near midnight, at a month's or a year's end, on 29 February or on a DST change day does so on every run of
``make test-calendar``, not on the one night a year it happens for real. A test that sets its own clock
(``time_machine.travel`` inside) still wins: travels nest.

Only this process travels: a Celery worker, an agent or a moto server in another process keeps the real clock, so a
test that involves one must not count on its clock being moved.

The ``calendar`` marker names the tests of the rules the product applies to "now" (spend months, price effective
dates, early-deletion days, grace periods, retention ages, holds, leases, approvals' cooling-off) that the sweep runs.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import time_machine

_INSTANT = pytest.StashKey[datetime | None]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--clock",
        default="",
        metavar="INSTANT",
        help="run each test with the clock set to this ISO 8601 instant (e.g. 2026-12-31T23:59:30Z), ticking on",
    )


def clock_instant(raw: str) -> datetime:
    """The instant of ``--clock``: ISO 8601 with an offset or Z; a naive time is refused, not guessed as UTC."""
    try:
        instant = datetime.fromisoformat(raw)
    except ValueError:
        raise pytest.UsageError(f"--clock={raw!r} is not an ISO 8601 instant (e.g. 2026-12-31T23:59:30Z)") from None
    if instant.tzinfo is None:
        raise pytest.UsageError(f"--clock={raw!r} has no offset: write it in UTC with a Z")
    return instant.astimezone(UTC)


# The modules of the rules the product applies to "now", marked ``calendar`` here in one list (a single test elsewhere
# can carry ``@pytest.mark.calendar`` itself). Kept to the rules: no browser, worker or agent tests, so that
# `make test-calendar` runs them at four instants in a few minutes.
CALENDAR_MODULES = frozenset(
    {
        # spend months, price and cost-center effective dates, UTC days of the rollups
        "tests/catalog/test_spend.py",
        "tests/catalog/test_spend_report.py",
        "tests/catalog/test_usage.py",
        "tests/fleet/test_pricebook.py",
        "tests/spend/test_teams.py",
        # early-deletion days, grace periods and the trash window
        "tests/actions/test_early_deletion.py",
        "tests/actions/test_settings_grace.py",
        "tests/actions/test_softdelete.py",
        # retention ages
        "tests/retention/test_policies.py",
        "tests/retention/test_tiering.py",
        # holds and leases
        "tests/actions/test_hold_modes.py",
        "tests/actions/test_hold_release_quorum.py",
        "tests/actions/test_leases.py",
        # cooling-off, approvals and their expiry
        "tests/approvals/test_change_requests.py",
        "tests/approvals/test_soft_delete_quorum.py",
        "tests/retention/test_lock.py",
    }
)


@pytest.hookimpl(tryfirst=True)  # before -m reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("::")[0] in CALENDAR_MODULES:
            item.add_marker(pytest.mark.calendar)


def pytest_configure(config: pytest.Config) -> None:
    raw = config.getoption("--clock")
    config.stash[_INSTANT] = clock_instant(raw) if raw else None


def pytest_report_header(config: pytest.Config) -> str | None:
    instant = config.stash.get(_INSTANT, None)
    if instant is None:
        return None
    from django.conf import settings

    return f"clock: each test starts at {instant.isoformat()} (TIME_ZONE={settings.TIME_ZONE})"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Setup, call and teardown of the test all run in the traveled clock (fixtures build data at that instant)."""
    instant = item.config.stash.get(_INSTANT, None)
    if instant is None:
        return (yield)
    with time_machine.travel(instant, tick=True):
        return (yield)


def database_now() -> datetime:
    """The database's own clock, which time-machine does not move (like another process's): the retention lock's
    triggers read it. A test that must be past (or before) an instant by both clocks takes the earlier (or later) of
    this and ``timezone.now()``."""
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT clock_timestamp()")
            return cursor.fetchone()[0]
        cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        return datetime.fromisoformat(cursor.fetchone()[0]).replace(tzinfo=UTC)


@pytest.fixture
def database_clock(db):
    """The product's clock set to the database's (ticking), for a test of a guard the database keeps by its own clock
    (the retention lock, a compliance hold's date): there the two clocks must agree, whatever ``--clock`` says."""
    with time_machine.travel(database_now(), tick=True) as traveller:
        yield traveller
