"""Values formatted for people: money that never reads 0.00 when it is not, audit changes in words, paths that wrap
between their parts, booleans and times in words."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from catalog.templatetags.fleet_format import path_breaks, when, yes_no
from dashboard.templatetags.audit_tags import audit_changes
from spend.templatetags.spend_format import money, signed_money


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        ("0", "0.00 USD"),
        ("-0.00", "0.00 USD"),
        ("1234.567", "1,234.57 USD"),
        ("0.005", "0.01 USD"),
        ("0.004217", "0.0042 USD"),
        ("-0.001", "-0.001 USD"),
        ("0.000000001", "0.000000001 USD"),
        ("0.0000000001", "<0.000000001 USD"),
    ],
)
def test_money_never_reads_zero_for_a_sum_that_is_not(amount, shown):
    assert money(Decimal(amount)) == shown


def test_a_small_change_of_money_keeps_its_sign_and_its_digits():
    assert signed_money(Decimal("0.0042")) == "+0.0042 USD"
    assert signed_money(Decimal("-12.3")) == "-12.30 USD"
    assert signed_money(Decimal("0")) == "0.00 USD"


def test_an_audit_change_reads_as_words_not_python():
    lines = audit_changes({"held": False}, {"held": True, "hold": 12, "mode": "legal", "retain_until": None})
    assert lines == ["held: no → yes", "hold: 12", "mode: legal"]
    lines = audit_changes(
        {"state": "copying", "copy": 46, "location": "s3:a"},
        {"state": "completed", "bytes_done": 3 * 2**30, "at": "2026-11-27T17:32:28.123456+00:00", "tiers": ["a", "b"]},
    )
    assert lines == [
        "state: copying → completed",
        "copy was 46",
        "location was s3:a",
        "bytes done: 3.0 GiB",
        "at: 2026-11-27 17:32:28 UTC",
        "tiers: a, b",
    ]
    assert not any("True" in line or "False" in line or "None" in line for line in lines)
    assert audit_changes(None, None) == [] and audit_changes({"a": 1}, {"a": 1}) == []


def test_a_path_wraps_at_its_slashes_and_stays_escaped():
    assert path_breaks("llm/run/__0_0.distcp") == "llm/<wbr>run/<wbr>__0_0.distcp"
    assert path_breaks("a/<b>") == "a/<wbr>&lt;b&gt;"


def test_booleans_and_times_in_words():
    assert (yes_no(True), yes_no(False), yes_no(None), yes_no(False, "held,free")) == ("Yes", "No", "—", "free")
    html = when(datetime(2026, 11, 3, 7, 5, tzinfo=UTC))
    assert ">3 Nov 2026, 07:05 UTC</time>" in html and 'title="2026-11-03T07:05:00+00:00"' in html
    assert when(None) == "—"
