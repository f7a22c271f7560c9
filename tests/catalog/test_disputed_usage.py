"""One verdict, every view: a change of a copy's state moves its bytes in today's rollups at once.

``spend.usage.copies_restated`` is what verification calls right after it writes verdicts; these tests
change a copy's state directly (as a verdict would) and call it, with copies at several locations.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from catalog.choices import CopyState
from catalog.models import CheckpointCopy, CopyTierUsage
from fleet.pricebook import utc_today
from spend import report as spend
from spend.models import UsageCursor, UsageDaily, UsageMonthly
from spend.usage import copies_restated, usage_monthly_rebuild, usage_refresh
from tests.helpers.disputed import FLIPPED, copy_at, dcp

COPY_BYTES = 900 + 2 * 4096


@pytest.fixture
def two_copies(make_host, push):
    """Step 100 on hosts a and b, both complete and verified, rolled up today."""
    a, b = make_host("gpu-a01"), make_host("gpu-b01")
    push(a, dcp(100))
    push(b, dcp(100))
    return a, b


def by_state(location_id: int, day=None) -> dict[str, int]:
    rows = (
        UsageDaily.objects.filter(location_id=location_id, day=day or utc_today())
        .values("state")
        .annotate(n=Sum("bytes"))
    )
    return {r["state"]: r["n"] for r in rows}


def month_by_state(location_id: int) -> dict[str, int]:
    rows = UsageMonthly.objects.filter(location_id=location_id).values("state").annotate(n=Sum("byte_days"))
    return {r["state"]: r["n"] for r in rows}


def waste(kind: str) -> tuple[int, object]:
    today = utc_today()
    table = spend.waste(spend.basis_for(spend.Period.month(today.year, today.month), today=today))
    (row,) = [r for r in table.rows if r["key"] == kind]
    return row["stored"], row["spend"]


def test_a_copy_made_corrupt_moves_to_corrupt_in_todays_rows_and_the_waste_at_once(two_copies):
    a, b = two_copies
    assert by_state(b.location.pk) == {"complete": COPY_BYTES}
    assert waste("corrupt") == (0, 0)
    copy = copy_at(b, 100)
    CheckpointCopy.objects.filter(pk=copy.pk).update(state=CopyState.CORRUPT)  # as a verdict would
    assert copies_restated([copy.pk]) == 1
    assert by_state(b.location.pk) == {"corrupt": COPY_BYTES}
    assert month_by_state(b.location.pk) == {"corrupt": COPY_BYTES}
    assert by_state(a.location.pk) == {"complete": COPY_BYTES}  # the other location is untouched
    stored, cost = waste("corrupt")
    assert stored == COPY_BYTES and cost > 0

    CheckpointCopy.objects.filter(pk=copy.pk).update(state=CopyState.COMPLETE)  # the verdict taken back
    copies_restated([copy.pk])
    assert by_state(b.location.pk) == {"complete": COPY_BYTES}
    assert waste("corrupt") == (0, 0)


def test_copies_at_several_locations_are_restated_in_one_call(two_copies):
    a, b = two_copies
    ids = [copy_at(a, 100).pk, copy_at(b, 100).pk]
    CheckpointCopy.objects.filter(pk__in=ids).update(state=CopyState.PARTIAL)
    assert copies_restated(ids) == 2
    assert by_state(a.location.pk) == by_state(b.location.pk) == {"partial": COPY_BYTES}
    assert waste("partial")[0] == 2 * COPY_BYTES


def test_a_temporary_copy_counts_as_a_left_over_and_other_runs_rows_stay(make_host, push):
    a = make_host("gpu-a01")
    push(a, dcp(100) + dcp(100, run="other-run"))
    other = CheckpointCopy.objects.get(location=a.location, checkpoint__run__name="other-run")
    before = list(UsageDaily.objects.filter(run=other.checkpoint.run).values_list("state", "bytes", "cost_nanos"))
    copy = CheckpointCopy.objects.get(location=a.location, checkpoint__run__name="llama-7b")
    CheckpointCopy.objects.filter(pk=copy.pk).update(temporary=True)
    copies_restated([copy.pk])
    assert set(UsageDaily.objects.filter(run=copy.checkpoint.run).values_list("state", flat=True)) == {"temporary"}
    after = list(UsageDaily.objects.filter(run=other.checkpoint.run).values_list("state", "bytes", "cost_nanos"))
    assert after == before


def test_a_location_behind_today_is_carried_forward_first_so_the_past_keeps_its_state(two_copies):
    _, b = two_copies
    today = utc_today()
    copy = copy_at(b, 100)
    CheckpointCopy.objects.filter(pk=copy.pk).update(state=CopyState.CORRUPT)
    tomorrow = today + timedelta(days=1)
    copies_restated([copy.pk], today=tomorrow)
    assert by_state(b.location.pk, today) == {"complete": COPY_BYTES}
    assert by_state(b.location.pk, tomorrow) == {"corrupt": COPY_BYTES}
    assert UsageCursor.objects.get(location=b.location).day == tomorrow
    assert set(UsageDaily.objects.filter(location=b.location, day=tomorrow).values_list("carried", flat=True)) == {True}


def test_restated_rows_are_what_a_refresh_from_the_files_would_write(two_copies):
    a, b = two_copies
    ids = [copy_at(a, 100).pk, copy_at(b, 100).pk]
    CheckpointCopy.objects.filter(pk__in=ids).update(state=CopyState.CORRUPT)
    copies_restated(ids)

    def rows():
        fields = ("location_id", "day", "team_id", "run_id", "run_status", "tier", "storage_class", "state")
        return sorted(UsageDaily.objects.values_list(*fields, "bytes", "files", "cost_nanos", "carried"))

    restated = rows()
    months = sorted(UsageMonthly.objects.values_list("location_id", "run_id", "state", "byte_days", "cost_nanos"))
    usage_monthly_rebuild()  # every month row again from the daily rows: the same
    assert (
        sorted(UsageMonthly.objects.values_list("location_id", "run_id", "state", "byte_days", "cost_nanos")) == months
    )
    for kit in (a, b):
        usage_refresh(location=kit.location, day=utc_today())
    assert rows() == restated


def test_restating_is_idempotent_and_reads_no_shard_file(two_copies):
    a, b = two_copies
    ids = [copy_at(a, 100).pk, copy_at(b, 100).pk]
    CheckpointCopy.objects.filter(pk__in=ids).update(state=CopyState.CORRUPT)
    with CaptureQueriesContext(connection) as ctx:
        copies_restated(ids)
    assert not [q for q in ctx.captured_queries if "catalog_shardfile" in q["sql"]]
    rows = sorted(UsageDaily.objects.values_list("location_id", "day", "state", "bytes", "cost_nanos", "carried"))
    copies_restated(ids)
    assert (
        sorted(UsageDaily.objects.values_list("location_id", "day", "state", "bytes", "cost_nanos", "carried")) == rows
    )
    assert CopyTierUsage.objects.count() == 2


def test_nothing_to_restate_for_no_copies_or_a_location_never_rolled_up(two_copies):
    a, _ = two_copies
    assert copies_restated([]) == 0
    UsageCursor.objects.filter(location=a.location).delete()
    UsageDaily.objects.filter(location=a.location).delete()
    assert copies_restated([copy_at(a, 100).pk]) == 0
    assert not UsageDaily.objects.filter(location=a.location).exists()


def test_the_flipped_copy_keeps_complete_bytes_when_disputed(make_host, push):
    # A disputed copy keeps its state (promise 10): its bytes are not waste.
    a, b = make_host("gpu-a01"), make_host("gpu-b01")
    push(a, dcp(100))
    push(b, dcp(100, **FLIPPED))
    assert by_state(a.location.pk) == by_state(b.location.pk) == {"complete": COPY_BYTES}
    assert waste("corrupt") == (0, 0)
