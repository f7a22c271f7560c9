"""Spend: the product's numbers against an independent computation, to the cent, and the pages that show them.

The fleet below is pushed through the real inventory API on known UTC days, with a price change in
the middle of January, deletions on known days and a month boundary crossed at midnight. The
expected spend is worked out here from the list of events alone, with plain Decimal arithmetic:
each day's bytes x the price in force that day / 2**30 / the days of that month.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.actor import Actor
from catalog.models import Run, Team
from fleet.pricebook import utc_today
from spend import report as spend
from spend.models import UsageDaily, UsageMonthly
from spend.prices import price_set
from spend.usage import usage_carry_forward_all
from tests.conftest import queries_for
from tests.helpers.spend import (
    A50,
    A200,
    B10,
    FEBRUARY,
    JANUARY,
    RUN_TEAM,
    TODAY,
    by_cost_center,
    by_team,
    by_tier,
    cents,
    expected,
    files,
    fleet_of,
    fleet_of_more,
)
from tests.helpers.usage import (
    GIB,
    assert_monthly_is_the_sum_of_the_daily_rows,
    checkpoint_bytes,
    dcp,
    flat_prices,
    utc,
)


def rows_by(table: spend.Table, key: str, value: str = "spend") -> dict:
    return {row[key]: row[value] for row in table.rows}


def test_january_spend_matches_an_independent_computation_to_the_cent(scenario):
    basis = spend.basis_for(JANUARY, today=TODAY)
    total = expected(JANUARY.first, JANUARY.last)["all"]
    summary = spend.summary(basis)
    assert cents(summary.spend) == cents(total)
    assert abs(summary.spend - total) < Decimal("0.000001")  # only the per-row rounding to a billionth
    assert summary.forecast is None  # a closed month has no forecast

    teams = rows_by(spend.by_team(basis), "team")
    assert {k: cents(v) for k, v in teams.items()} == {
        k: cents(v) for k, v in expected(JANUARY.first, JANUARY.last, group=by_team).items()
    }
    tiers = rows_by(spend.by_tier(basis), "tier")
    want = expected(JANUARY.first, JANUARY.last, group=by_tier)
    assert {k: cents(v) for k, v in tiers.items()} == {
        "NVMe (GPU host)": cents(want["nvme"]),
        "Parallel file system": cents(want["pfs"]),
    }
    centers = rows_by(spend.by_cost_center(basis), "cost_center")
    assert {k: cents(v) for k, v in centers.items()} == {
        k: cents(v) for k, v in expected(JANUARY.first, JANUARY.last, group=by_cost_center).items()
    }
    runs = rows_by(spend.by_run(basis), "run")
    want_runs = expected(JANUARY.first, JANUARY.last, group=lambda run, tier: f"{RUN_TEAM[run]}/{run}")
    assert {k: cents(v) for k, v in runs.items()} == {k: cents(v) for k, v in want_runs.items()}
    locations = rows_by(spend.by_location(basis), "location")
    assert set(locations) == {"gpu-a01:/mnt/nvme0/checkpoints", "lustre-gw1:/lustre/ckpt"}
    assert cents(sum(locations.values())) == cents(total)


def test_the_price_change_applies_from_its_day_and_not_before(scenario):
    for first, last in ((date(2027, 1, 1), date(2027, 1, 15)), (date(2027, 1, 16), date(2027, 1, 31))):
        got = sum(
            spend.money(n)
            for n in UsageDaily.objects.filter(day__range=(first, last), tier="nvme").values_list(
                "cost_nanos", flat=True
            )
        )
        assert cents(got) == cents(expected(first, last, group=by_tier)["nvme"])


def test_the_days_of_a_month_cross_midnight_in_utc(scenario):
    """Jan 31 ends at 24:00 UTC: a push at 23:59:30 counts in January, the deletion at 00:00:30 in February."""
    for day in (date(2027, 1, 31), date(2027, 2, 1)):
        basis = spend.basis_for(spend.Period.day(day), today=TODAY)
        assert cents(spend.summary(basis).spend) == cents(expected(day, day)["all"])
    gamma = Run.objects.get(name="gamma")
    assert UsageDaily.objects.filter(run=gamma).latest("day").day == date(2027, 1, 31)


def test_last_months_spend_does_not_change_after_a_deletion_today(scenario):
    january = spend.basis_for(JANUARY, today=TODAY)
    before = spend.summary(january).spend
    before_teams = rows_by(spend.by_team(january), "team")
    scenario.delete_today()  # beta deleted from NVMe on Feb 10, and a PFS price for March entered
    january = spend.basis_for(JANUARY, today=TODAY)
    assert spend.summary(january).spend == before
    assert rows_by(spend.by_team(january), "team") == before_teams
    assert Run.objects.filter(name="beta").exists()


def test_this_month_compares_with_last_and_forecasts_at_todays_placement(scenario):
    scenario.delete_today()
    basis = spend.basis_for(FEBRUARY, today=TODAY)
    assert basis.as_of == TODAY
    summary = spend.summary(basis)
    month_to_date = expected(FEBRUARY.first, TODAY)["all"]
    assert cents(summary.spend) == cents(month_to_date)
    assert cents(summary.previous) == cents(expected(JANUARY.first, JANUARY.last)["all"])

    # The rest of February at Feb 10's placement (alpha 200 on NVMe, alpha 50 on PFS) and prices.
    held = [(A200, Decimal("0.16")), (A50, Decimal("0.03"))]
    daily = sum(Decimal(checkpoint_bytes(s)) * p / GIB / 28 for s, p in held)
    assert cents(summary.forecast) == cents(month_to_date + daily * 18)
    assert cents(summary.change) == cents(month_to_date + daily * 18 - summary.previous)
    # March at today's placement honours the PFS price entered for March 15.
    march = Decimal(checkpoint_bytes(A200)) * Decimal("0.16") / GIB + Decimal(checkpoint_bytes(A50)) / GIB * (
        Decimal("0.03") * 14 / 31 + Decimal("0.05") * 17 / 31
    )
    assert cents(summary.next_month) == cents(march)

    teams = {r["team"]: r for r in spend.by_team(basis).rows}
    llm_to_date = expected(FEBRUARY.first, TODAY, group=by_team)["llm"]
    assert cents(teams["llm"]["spend"]) == cents(llm_to_date)
    assert cents(teams["llm"]["forecast"]) == cents(llm_to_date + daily * 18)
    assert cents(teams["llm"]["next_month"]) == cents(march)
    assert cents(teams["vision"]["forecast"]) == cents(
        expected(FEBRUARY.first, TODAY, group=by_team).get("vision", Decimal(0))
    )
    assert cents(teams["vision"]["previous"]) == cents(expected(JANUARY.first, JANUARY.last, group=by_team)["vision"])


def test_waste_counts_a_finished_run_still_on_nvme_from_the_day_it_finished(scenario, fleet):
    Run.objects.filter(name="beta").update(status="finished")
    fleet.push(scenario.nvme, files(("beta", 10, B10), ("alpha", 200, A200)), at=utc(2027, 2, 10, 12))
    basis = spend.basis_for(FEBRUARY, today=TODAY)
    waste = {r["key"]: r for r in spend.waste(basis).rows}
    beta_today = Decimal(checkpoint_bytes(B10)) * Decimal("0.16") / GIB / 28
    assert cents(waste["finished_on_nvme"]["spend"]) == cents(beta_today)
    assert waste["finished_on_nvme"]["stored"] == checkpoint_bytes(B10)
    # January's NVMe spend on beta was not waste: it was active then.
    assert spend.waste(spend.basis_for(JANUARY, today=TODAY)).total["spend"] == 0


def test_the_fastest_growing_runs_are_listed_by_growth(scenario):
    basis = spend.basis_for(JANUARY, today=TODAY)
    table = spend.growing_runs(basis)
    # From Dec 31 (nothing) to Jan 31: alpha holds A200 on NVMe and A50 on PFS; gamma G1; beta B10.
    assert [r["run"] for r in table.rows] == ["vision/gamma", "llm/alpha", "llm/beta"]
    alpha = table.rows[1]
    assert alpha["growth"] == checkpoint_bytes(A200) + checkpoint_bytes(A50)


def test_a_full_month_costs_its_monthly_price_in_28_29_30_and_31_day_months(make_host, fleet):
    flat_prices(nvme="0.10")
    kit = make_host()
    blob = [{"path": "llm/alpha/blob.bin", "size": 10 * GIB, "mtime": 1790000000.0}]
    fleet.push(kit, blob, at=utc(2028, 1, 31, 23))
    fleet.at(utc(2028, 5, 1, 1))
    usage_carry_forward_all()
    for month in (spend.Period.month(2028, 2), spend.Period.month(2028, 3), spend.Period.month(2028, 4)):
        basis = spend.basis_for(month, today=date(2028, 5, 1))
        assert cents(spend.summary(basis).spend) == Decimal("1.00"), month
    assert UsageDaily.objects.filter(day__range=(date(2028, 2, 1), date(2028, 2, 29))).count() == 29
    # Jan 31 -> Feb 1: the January day costs a 31st of the price, the February days a 29th.
    costs = dict(
        UsageDaily.objects.filter(day__in=[date(2028, 1, 31), date(2028, 2, 1)]).values_list("day", "cost_nanos")
    )
    assert costs == {date(2028, 1, 31): round(10**9 / 31), date(2028, 2, 1): round(10**9 / 29)}


# --- pages and API ---------------------------------------------------------------------------------


def test_the_spend_page_shows_the_month_in_money_with_currency_and_cents(scenario, finance):
    response = finance.get("/spend/?month=2027-01")
    assert response.status_code == 200
    html = response.content.decode()
    total = cents(expected(JANUARY.first, JANUARY.last)["all"])
    assert f"{total:,.2f} USD" in html
    llm = cents(expected(JANUARY.first, JANUARY.last, group=by_team)["llm"])
    assert f"{llm:,.2f} USD" in html
    assert re.search(r"\d+\.\d GiB", html)  # bytes in binary units
    assert "CC-100 Foundation models" in html
    for name in ("by-team", "by-cost-center", "by-run", "by-tier", "by-location", "waste", "daily", "monthly-by-tier"):
        assert f"/api/v1/spend/{name}/?month=2027-01&amp;format=csv" in html, name
    assert "chart.umd.min.js" in html and "charts.js" in html
    assert 'id="chart-monthly-tier" type="application/json"' in html


def test_every_table_exports_the_same_numbers_as_csv_and_json(scenario, finance):
    total = cents(expected(JANUARY.first, JANUARY.last)["all"])
    body = finance.get("/api/v1/spend/by-team/?month=2027-01").json()
    assert body["currency"] == "USD"
    assert body["total"]["spend"] == f"{total}"
    response = finance.get("/api/v1/spend/by-team/?month=2027-01&format=csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="spend-by-team-2027-01.csv"' in response["Content-Disposition"]
    table = list(csv.reader(io.StringIO(response.content.decode())))
    assert table[0][:3] == ["Team", "Cost center", "Spend (USD)"]
    # The CSV carries money to six decimals (a spreadsheet sums small sums), the page and the JSON to cents.
    exact = expected(JANUARY.first, JANUARY.last)["all"]
    assert table[-1][0] == "Total" and table[-1][2] == f"{exact.quantize(Decimal('0.000001'), ROUND_HALF_UP)}"
    assert Decimal(table[-1][2]).quantize(Decimal("0.01"), ROUND_HALF_UP) == total
    gib_months = table[0].index("GiB-months")
    assert all(re.fullmatch(r"\d+\.\d{3}", row[gib_months]) for row in table[1:]), table
    # Scoped to a team, the file is named after the team, not its number.
    team = Run.objects.get(name="alpha").team
    scoped = finance.get(f"/api/v1/spend/by-run/?month=2027-01&team={team.pk}&format=csv")
    assert f'filename="spend-by-run-2027-01-team-{team.name.lower()}.csv"' in scoped["Content-Disposition"]
    for name in spend.TABLES:
        assert finance.get(f"/api/v1/spend/{name}/?month=2027-01&format=csv").status_code == 200, name
    summary = finance.get("/api/v1/spend/?month=2027-01").json()
    assert summary["spend"] == f"{total}"
    assert summary["tables"]["waste"].endswith("/api/v1/spend/waste/?month=2027-01")


def test_a_run_page_shows_its_spend_and_its_steps_by_tier(scenario, finance):
    alpha = Run.objects.get(name="alpha")
    response = finance.get(f"/spend/runs/{alpha.pk}/?month=2027-01")
    assert response.status_code == 200
    html = response.content.decode()
    want = expected(JANUARY.first, JANUARY.last, group=lambda run, tier: run)["alpha"]
    assert f"{cents(want):,.2f} USD" in html
    assert "step 200" in html and "step 50" in html
    steps = finance.get(f"/api/v1/spend/run-steps/?run={alpha.pk}").json()
    assert [r["checkpoint"] for r in steps["rows"]] == ["step 50", "step 200"]
    assert steps["rows"][0]["tier:pfs"] == checkpoint_bytes(A50)


def test_a_csv_cell_that_would_run_as_a_formula_is_quoted(db):
    basis = spend.basis_for(JANUARY, today=TODAY)
    table = spend.Table("t", "T", [spend.Column("run", "Run"), spend.Column("spend", "Spend", "money")], [], basis)
    table.rows = [{"run": '=HYPERLINK("http://x")', "spend": Decimal("1.005")}]
    out = list(csv.reader(io.StringIO(spend.table_csv(table))))
    assert out[1] == ['\'=HYPERLINK("http://x")', "1.005000"]


@pytest.mark.parametrize(
    "url",
    [
        "/spend/?month=2027-02",
        "/spend/?month=2027-01",
        "/spend/?day=2027-02-03",
        "/spend/runs/?month=2027-02",
        "/spend/prices/",
        "/api/v1/spend/?month=2027-02",
        "/api/v1/spend/by-run/?month=2027-02",
        "/api/v1/spend/by-team/?month=2027-02&format=csv",
    ],
)
def test_spend_pages_make_as_many_queries_for_many_runs_as_for_one(make_host, fleet, sign_in, url):
    fleet_of(fleet, make_host, 1)
    fleet.at(utc(2027, 2, 10, 12))
    signed_in = sign_in()
    one = queries_for(signed_in, url)
    fleet_of_more(fleet, make_host)
    fleet.at(utc(2027, 2, 10, 12))
    assert queries_for(signed_in, url) == one


def test_the_run_spend_page_query_count_does_not_grow_with_steps(make_host, fleet, sign_in):
    fleet_of(fleet, make_host, 1)
    run = Run.objects.get()
    fleet.at(utc(2027, 2, 10, 12))
    signed_in = sign_in()
    one = queries_for(signed_in, f"/spend/runs/{run.pk}/?month=2027-02")
    kit = make_host("gpu-steps", "/mnt/steps")
    fleet.push(kit, [f for s in range(1, 15) for f in dcp(run.team.name, run.name, s * 10, 100)], at=utc(2027, 2, 9))
    fleet.at(utc(2027, 2, 10, 12))
    assert queries_for(signed_in, f"/spend/runs/{run.pk}/?month=2027-02") == one


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("/spend/", "No spend recorded yet"),
        ("/spend/?month=1999-12", "No spend recorded yet"),
        ("/spend/runs/", "No usage was recorded in this period"),
        ("/spend/prices/", "Price book"),
    ],
)
def test_every_spend_page_answers_on_an_empty_database(signed_in, url, words):
    response = signed_in.get(url)
    assert response.status_code == 200
    assert words in response.content.decode()


def test_an_empty_month_says_so_when_others_have_spend(scenario, finance):
    html = finance.get("/spend/?month=2026-06").content.decode()
    assert "No usage in June 2026" in html


def test_the_api_answers_on_an_empty_database(signed_in):
    body = signed_in.get("/api/v1/spend/").json()
    assert body["spend"] == "0.00" and body["as_of"] is None
    assert signed_in.get("/api/v1/spend/by-team/").json()["rows"] == []
    assert signed_in.get("/api/v1/spend/nonsense/").status_code == 404


def test_a_stranger_is_sent_to_sign_in(client):
    assert client.get("/spend/").status_code == 302
    assert client.get("/api/v1/spend/").status_code in (401, 403)


def test_the_nav_links_to_spend(signed_in):
    html = signed_in.get("/spend/").content.decode()
    assert re.search(r'<a href="/spend/" aria-current="page">Spend</a>', html)


def test_queries_of_a_table_are_counted_without_the_page(scenario):
    basis = spend.basis_for(FEBRUARY, today=TODAY)
    with CaptureQueriesContext(connection) as ctx:
        spend.by_run(basis)
    assert len(ctx.captured_queries) <= 5  # rows, the runs' names, the forecast's breakdown, locations, price book


def test_a_run_without_usage_says_so_and_a_missing_run_is_a_404(signed_in):
    run = Run.objects.create(team=Team.objects.create(name="llm"), name="quiet")
    html = signed_in.get(f"/spend/runs/{run.pk}/").content.decode()
    assert "No usage of this run" in html
    assert signed_in.get("/spend/runs/999999/").status_code == 404


def test_a_team_view_narrows_every_table_to_the_team(scenario, finance):
    vision = Team.objects.get(name="vision")
    html = finance.get(f"/spend/?month=2027-01&team={vision.pk}").content.decode()
    want = cents(expected(JANUARY.first, JANUARY.last, group=by_team)["vision"])
    assert f"{want:,.2f} USD" in html
    assert "llm/alpha" not in html


@pytest.mark.parametrize("query", ["month=9999-12", "day=9999-12-31", "month=2027-13", "day=2027-02-30", "month=x"])
def test_a_period_out_of_range_shows_this_month(signed_in, query):
    before = utc_today()
    response = signed_in.get(f"/spend/?{query}")
    api = signed_in.get(f"/api/v1/spend/?{query}")
    this_month = {f"month={day:%Y-%m}" for day in (before, utc_today())}  # the same month unless midnight passed
    assert response.status_code == 200
    assert response.context["period"].param in this_month
    assert api.status_code == 200
    assert {url.split("?")[1] for url in api.json()["tables"].values()} <= this_month


# --- the monthly rollup ----------------------------------------------------------------------------


def test_the_monthly_rollup_is_the_sum_of_the_daily_rows_for_every_month(scenario, fleet):
    assert assert_monthly_is_the_sum_of_the_daily_rows() == 2  # January and February so far
    scenario.delete_today()  # a refresh of today, and a price entered for March
    assert_monthly_is_the_sum_of_the_daily_rows()
    # A price entered today for a day already rolled up this month prices those days again: the month follows.
    price_set(tier="nvme", kind="nvme", price="0.20", effective_from=date(2027, 2, 3), actor=Actor.command(label="f"))
    assert_monthly_is_the_sum_of_the_daily_rows()
    # A run finishing today shows in today's rows only; January keeps the status it had.
    Run.objects.filter(name="alpha").update(status="finished")
    fleet.push(scenario.nvme, files(("alpha", 200, A200)), at=utc(2027, 2, 10, 18))
    assert_monthly_is_the_sum_of_the_daily_rows()
    # Beat carries every location into March and April.
    fleet.at(utc(2027, 4, 2, 0, 30))
    usage_carry_forward_all()
    assert assert_monthly_is_the_sum_of_the_daily_rows() == 4
    # And the spend read from it is the daily rows' spend, for a closed month and the current one.
    for period, today in ((FEBRUARY, date(2027, 4, 2)), (spend.Period.month(2027, 4), date(2027, 4, 2))):
        basis = spend.basis_for(period, today=today)
        daily = UsageDaily.objects.filter(day__range=(period.first, period.last)).values_list("cost_nanos", flat=True)
        assert spend.summary(basis).spend == spend.money(sum(n or 0 for n in daily))
        assert sum(r["spend"] for r in spend.by_run(basis).rows) == spend.summary(basis).spend


def test_the_spend_overview_reads_the_monthly_rollup_not_the_daily_rows_of_the_month(scenario):
    """A closed month's sums come from ``UsageMonthly``: tampering with it (never done) shows on the page's
    numbers, which proves the page does not sum the month's daily rows again."""
    basis = spend.basis_for(JANUARY, today=TODAY)
    before = spend.summary(basis).spend
    UsageMonthly.objects.filter(month=JANUARY.first).update(cost_nanos=0)
    assert spend.summary(spend.basis_for(JANUARY, today=TODAY)).spend == 0 != before
    assert all(r["spend"] == 0 for r in spend.by_team(spend.basis_for(JANUARY, today=TODAY)).rows)
