"""The printable spend report for finance: a month's figures from the spend tables, on paper.

The fleet is the spend tests' own (``scenario`` in tests/catalog/conftest.py): its January is known to the cent
from an independent computation, a price changes on Jan 16, and Feb 10 is "today".
"""

from __future__ import annotations

import re

import pytest

from catalog.models import Team
from tests.conftest import queries_for
from tests.helpers.spend import (
    JANUARY,
    by_cost_center,
    by_team,
    by_tier,
    cents,
    expected,
    fleet_of,
    fleet_of_more,
)
from tests.helpers.usage import utc

URL = "/spend/report/"


def money(value) -> str:
    return f"{cents(value):,.2f} USD"


def test_the_report_of_a_closed_month_has_every_section_to_the_cent(scenario, finance):
    response = finance.get(f"{URL}?month=2027-01")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Storage spend report" in html and "January 2027" in html
    assert money(expected(JANUARY.first, JANUARY.last)["all"]) in html
    for team, value in expected(JANUARY.first, JANUARY.last, group=by_team).items():
        assert money(value) in html, team
    for cost_center, value in expected(JANUARY.first, JANUARY.last, group=by_cost_center).items():
        assert cost_center in html and money(value) in html, cost_center
    for tier, value in expected(JANUARY.first, JANUARY.last, group=by_tier).items():
        assert money(value) in html, tier
    for section in ("by-team", "by-cost-center", "by-tier", "by-location", "by-run", "waste"):
        assert f'id="{section}"' in html, section
    assert "Top runs by spend" in html and "llm/alpha" in html
    assert "Month over month" in html and "By month and team" in html and "By month and tier" in html
    # A closed month is final: no forecast, and it says why.
    assert "January 2027 is over: its spend above is final" in html
    assert html.count('class="report-section"') == 8


def test_the_report_names_who_made_it_when_and_the_prices_it_used(scenario, finance):
    html = finance.get(f"{URL}?month=2027-01").content.decode()
    assert re.search(r"Generated</dt><dd>2027-02-10 15:00:00 UTC by fin<", html)
    assert "Price book in force, USD per GiB-month" in html
    # The NVMe price in force on Jan 1, the one from Jan 16 (a renewal), and the PFS price, with currency.
    prices = html[html.index('id="prices"') :]
    assert "from the first day" in prices and "from 2027-01-16" in prices
    assert "0.16 USD" in prices and "0.10 USD" in prices and "0.03 USD" in prices
    assert "renewal" in prices


def test_the_current_month_forecasts_its_end_and_the_next_month(scenario, finance):
    html = finance.get(URL).content.decode()  # today is Feb 10: February, month to date
    assert "February 2027" in html and "Month to date" in html
    assert "Forecast, month end" in html and "March 2027" in html
    assert "is over" not in html


def test_the_report_has_a_print_stylesheet_and_a_print_button(scenario, finance):
    html = finance.get(f"{URL}?month=2027-01").content.decode()
    assert re.search(r'<link rel="stylesheet" href="[^"]*css/print\.css" media="print">', html)
    assert re.search(r'<button type="button" class="[^"]*" data-print>Print</button>', html)
    assert "js/charts.js" in html  # where the Print button's handler lives


def test_a_day_asked_for_reports_its_whole_month(scenario, finance):
    html = finance.get(f"{URL}?day=2027-01-20").content.decode()
    assert "January 2027" in html and money(expected(JANUARY.first, JANUARY.last)["all"]) in html


def test_an_empty_month_says_so_and_what_to_do(scenario, finance):
    response = finance.get(f"{URL}?month=2026-06")
    assert response.status_code == 200
    html = response.content.decode()
    assert "No usage in June 2026" in html
    assert "its spend is 0.00 USD" in html and "report this month" in html
    assert 'id="by-team"' not in html
    assert "Price book in force" in html  # what would have applied


def test_an_empty_database_says_no_spend_is_recorded_yet(signed_in):
    response = signed_in.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "No spend recorded yet" in html and "Fleet" in html


@pytest.mark.parametrize("role", ["viewer", "finance", "operator", "approver", "admin"])
def test_every_role_may_read_it_as_it_reads_the_spend_page(signed_in_as, role):
    response = signed_in_as(role).get(f"{URL}?month=2027-01")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<h1>Storage spend report" in html
    assert response.context["period"].param == "month=2027-01"
    assert "needs the finance role" not in html


def test_a_stranger_is_sent_to_sign_in(client):
    response = client.get(URL)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


@pytest.mark.parametrize("role", ["viewer", "finance"])
def test_the_spend_page_links_to_the_report_for_everyone_who_reads_it(signed_in_as, role):
    html = signed_in_as(role).get("/spend/?month=2027-01").content.decode()
    assert '<a class="button button--primary" href="/spend/report/?month=2027-01">Printable report' in html


@pytest.mark.parametrize("month", ["2027-01", "2027-02"])
def test_the_report_makes_as_many_queries_for_many_runs_as_for_one(make_host, fleet, sign_in, month):
    fleet_of(fleet, make_host, 1)
    fleet.at(utc(2027, 2, 10, 12))
    signed_in = sign_in()
    one = queries_for(signed_in, f"{URL}?month={month}")
    fleet_of_more(fleet, make_host)
    Team.objects.filter(name="crew1").update(cost_center="CC-9")
    fleet.at(utc(2027, 2, 10, 12))
    assert queries_for(signed_in, f"{URL}?month={month}") == one
