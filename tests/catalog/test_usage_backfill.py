"""Estimated usage before the first inventory (spend.backfill, ``manage.py usage_backfill``): from file times,
marked as estimated, never over measured days, months the sum of their days, and said so on the spend page."""

from __future__ import annotations

from datetime import date

import pytest
from django.core.management import CommandError, call_command
from django.db.models import Sum

from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Run
from ckptfleet.errors import DomainError, PermissionRefused
from spend.backfill import usage_backfill
from spend.models import UsageDaily, UsageMonthly
from spend.report import cents
from spend.usage import money, usage_carry_forward_all
from tests.helpers.usage import (
    GIB,
    assert_monthly_is_the_sum_of_the_daily_rows,
    checkpoint_bytes,
    dcp,
    flat_prices,
    utc,
)

SEP_10 = utc(2026, 9, 10, 8).timestamp()
SEP_25 = utc(2026, 9, 25, 23, 30).timestamp()
TODAY = date(2026, 10, 5)


def _written_at(files: list[dict], stamp: float) -> list[dict]:
    return [{**f, "mtime": stamp} for f in files]


@pytest.fixture
def measured(make_host, fleet):
    """One host, first inventoried on Oct 5 (and carried to Oct 7): step 100 written on Sep 10, step 200 on
    Sep 25 (at 23:30 UTC, so it counts from Sep 25)."""
    flat_prices(nvme="0.10")
    kit = make_host()
    files = _written_at(dcp("llm", "alpha", 100, GIB), SEP_10) + _written_at(dcp("llm", "alpha", 200, GIB), SEP_25)
    fleet.push(kit, files, at=utc(2026, 10, 5, 10))
    fleet.at(utc(2026, 10, 7, 1))
    usage_carry_forward_all()
    return kit


def _measured_rows() -> list[tuple]:
    return sorted(
        UsageDaily.objects.filter(estimated=False).values_list("day", "run_id", "state", "bytes", "cost_nanos")
    )


def test_it_counts_each_file_from_its_modification_day_until_the_first_inventory(measured):
    result = usage_backfill(since=date(2026, 9, 1), actor=Actor.command(label="tests"), today=date(2026, 10, 7))
    days = dict(UsageDaily.objects.filter(estimated=True).values_list("day", "bytes"))
    assert min(days) == date(2026, 9, 10)  # nothing was there before the oldest file
    assert max(days) == date(2026, 10, 4)  # Oct 5 is measured
    assert days[date(2026, 9, 24)] == checkpoint_bytes(GIB)
    assert days[date(2026, 9, 25)] == 2 * checkpoint_bytes(GIB)
    assert result.locations == {measured.location.name: 34}  # Sep 1 .. Oct 4
    row = UsageDaily.objects.get(estimated=True, day=date(2026, 9, 24))
    assert (row.run.name, row.team.name, row.state, row.carried) == ("alpha", "llm", "complete", False)
    assert row.cost_nanos == round(checkpoint_bytes(GIB) * 0.10 / GIB / 30 * 10**9)
    event = AuditEvent.objects.get(action="usage.backfill")
    assert event.after["since"] == "2026-09-01" and event.after["rows"] == result.rows == 25


def test_it_never_rewrites_a_measured_day_and_a_second_run_changes_nothing(measured):
    before = _measured_rows()
    assert {r[0] for r in before} == {date(2026, 10, 5), date(2026, 10, 6), date(2026, 10, 7)}
    actor = Actor.command(label="tests")
    first = usage_backfill(since=date(2026, 9, 1), actor=actor, today=date(2026, 10, 7))
    estimated = sorted(UsageDaily.objects.filter(estimated=True).values_list("day", "bytes", "cost_nanos"))
    # Even asked to reach past the first inventory, it stops the day before it.
    second = usage_backfill(since=date(2026, 9, 1), actor=actor, today=date(2026, 10, 8))
    assert _measured_rows() == before
    assert sorted(UsageDaily.objects.filter(estimated=True).values_list("day", "bytes", "cost_nanos")) == estimated
    assert first.rows == second.rows
    # A later start than the history it already has: nothing to do.
    assert usage_backfill(since=date(2026, 10, 5), actor=actor, today=date(2026, 10, 8)).rows == 0
    assert _measured_rows() == before


def test_months_are_the_sum_of_their_days_and_count_the_estimated_ones(measured):
    usage_backfill(since=date(2026, 9, 1), actor=Actor.command(label="tests"), today=date(2026, 10, 7))
    assert assert_monthly_is_the_sum_of_the_daily_rows() == 2
    september = UsageMonthly.objects.get(month=date(2026, 9, 1), state="complete")
    assert (september.days, september.estimated_days) == (21, 21)  # Sep 10 .. Sep 30
    october = UsageMonthly.objects.get(month=date(2026, 10, 1), state="complete")
    assert (october.days, october.estimated_days) == (7, 4)  # Oct 1-4 estimated, Oct 5-7 measured


@pytest.mark.parametrize(
    ("since", "message"),
    [(date(2026, 10, 7), "before today"), (date(2026, 12, 1), "before today"), (date(2025, 1, 1), "at most 400")],
)
def test_it_refuses_a_start_that_is_not_in_the_past_year_and_changes_nothing(measured, since, message):
    before = sorted(UsageDaily.objects.values_list("day", "bytes"))
    with pytest.raises(DomainError, match=message):
        usage_backfill(since=since, actor=Actor.command(label="tests"), today=date(2026, 10, 7))
    assert sorted(UsageDaily.objects.values_list("day", "bytes")) == before
    assert not AuditEvent.objects.filter(action="usage.backfill").exists()


def test_a_person_without_the_finance_role_is_refused(measured, django_user_model):
    viewer = django_user_model.objects.create_user(username="vic", password="a-long-password-1")
    with pytest.raises(PermissionRefused, match="finance role"):
        usage_backfill(since=date(2026, 9, 1), actor=Actor.person(viewer, "ui"), today=date(2026, 10, 7))
    assert not UsageDaily.objects.filter(estimated=True).exists()


def test_the_command_reports_per_location_and_rejects_a_bad_date(measured, capsys):
    call_command("usage_backfill", since="2026-09-01")
    out = capsys.readouterr().out
    assert f"{measured.location.name}: 34 day(s) estimated" in out
    assert "from file modification times" in out
    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        call_command("usage_backfill", since="last month")


def test_the_spend_page_says_which_days_are_estimated(measured, sign_in, fleet):
    usage_backfill(since=date(2026, 9, 1), actor=Actor.command(label="tests"), today=date(2026, 10, 7))
    client = sign_in()
    september = client.get("/spend/?month=2026-09").content.decode()
    assert "21 days of this period estimated from file times" in september
    spent = UsageDaily.objects.filter(day__month=9).aggregate(total=Sum("cost_nanos"))["total"]
    assert spent > 0 and f"{cents(money(spent)):,.2f} USD" in september
    october = client.get("/spend/?month=2026-10").content.decode()
    assert "4 days of this period estimated from file times" in october
    measured_day = client.get("/spend/?day=2026-10-06").content.decode()
    assert "estimated from file times" not in measured_day
    alpha = Run.objects.get(name="alpha")
    run_page = client.get(f"/spend/runs/{alpha.pk}/?month=2026-09").content.decode()
    assert "21 days of this period estimated from file times" in run_page
