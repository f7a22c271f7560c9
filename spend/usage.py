# Safe SQL: table names come from model metadata and CASE arms from the price book; values are parameters.
"""Usage rollups: what each location stores per UTC day, by run, tier, storage class and state, with its cost.

Every spend page and API reads ``UsageDaily`` (and ``CopyTierUsage`` for a run's steps), never the
shard-file table. The rules, in one place:

- **Days are UTC days.** An inventory applied at 23:30 UTC counts for that UTC day whatever
  ``TIME_ZONE`` says, so a month's spend is the same wherever it is read.
- **Refresh.** Applying an inventory rewrites the location's rows of that day from its present
  files, in set-based SQL inside the ingest's transaction (``usage_refresh``). Several inventories
  in a day: the last one applied stands for the day.
- **Carry forward.** A day without an inventory holds the location's last known state: its rows
  of the last refreshed (or carried) day, copied to each missing day up to today, priced at each
  day's own price. Beat does it every hour for every location (``usage_carry_forward_all``), and a
  refresh first fills any gap before its own day, so the rule holds even if beat was down. A
  location whose last inventory was empty has a cursor and no rows, so nothing is carried.
- **Cost.** A row's cost for its day = bytes / 2**30 x the price per GiB-month in force that day
  (``fleet.pricebook``) / the number of days in that day's month, rounded once per row to a
  billionth of the currency (``cost_nanos``). Spend for any period is then a plain ``SUM`` of rows.
- **History survives deletions.** Past days are never refreshed again: deleting a checkpoint
  today changes today's rows, not last month's. Only a price point taking effect on a day already
  rolled up (allowed within the current month) prices those days again (``usage_reprice``).
- **One verdict, every view.** When verification changes copies' state (a checksum mismatch makes a copy
  corrupt, or takes that back), ``copies_restated`` moves those copies' bytes to their new state in
  today's rows of every location holding them, in the same transaction, from ``CopyTierUsage`` (what
  each copy holds, as the last refresh found it): no shard file is read again.
- **Estimates before the first inventory.** A new install has no history. ``usage_backfill`` (``manage.py
  usage_backfill --since``) writes the days before each location's first measured day from the files
  present now, each counted from the UTC day of its modification time, marked ``estimated``: files
  deleted before the install are missing from them, and the pages say the days are estimated. It never
  writes a day on which the location has measured (or carried) rows.
- **Months.** ``UsageMonthly`` holds each month's daily rows summed. Every function here that writes
  daily rows then rewrites the months they fall in from the daily rows (``rollup_months``), in the
  same transaction, so a month's row is always exactly the sum of its days.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction
from django.utils import timezone

from catalog.models import CheckpointCopy, CopyTierUsage, Run
from fleet.choices import DEFAULT_STORAGE_CLASS_TIERS, LocationKind
from fleet.models import Bucket, StorageLocation
from fleet.pricebook import GIB, PriceBook, Rule, month_days, utc_today
from spend.models import UsageCursor, UsageDaily, UsageMonthly, UsageState

NANOS = 10**9
CENT = Decimal("0.01")

USAGE = UsageDaily._meta.db_table
COPY_USAGE = CopyTierUsage._meta.db_table
MONTHLY = UsageMonthly._meta.db_table
RUN = Run._meta.db_table
_GROUP = "location_id, team_id, run_id, run_status, tier, storage_class, state"
_MONTH_SUMS = "days, byte_days, file_days, cost_nanos, estimated_days"
_MONTH_SUMS_SQL = "COUNT(*), SUM(bytes), SUM(files), SUM(cost_nanos), SUM(CASE WHEN estimated THEN 1 ELSE 0 END)"
_COLUMNS = (
    "day, location_id, team_id, run_id, run_status, tier, storage_class, state, bytes, files, cost_nanos, carried"
)


def money(nanos: int | None) -> Decimal:
    """A cost stored in billionths of the currency, as a Decimal of the currency (not yet rounded)."""
    return Decimal(nanos or 0).scaleb(-9)


def cost_sql(rules: tuple[Rule, ...], day: date, *, prefix: str = "") -> tuple[str, list]:
    """SQL for the cost in billionths of one row's bytes on ``day``, from the rules in force for its location.

    The rate per byte-day is computed here in Decimal (price x 1e9 / 2**30 / days of the month) and
    passed as a parameter; the database multiplies and rounds once. On PostgreSQL the product is
    exact (numeric); SQLite multiplies in double precision, which is exact to far below a billionth.
    """
    if not rules:
        return "NULL", []
    days = month_days(day)
    pg = connection.vendor == "postgresql"
    rate_sql = "CAST(%s AS NUMERIC)" if pg else "%s"
    whens: list[str] = []
    params: list = []
    for rule in rules:
        rate = rule.price * NANOS / (GIB * days)
        value = rate if pg else float(rate)
        if rule.storage_class:
            whens.append(f"WHEN {prefix}tier = %s AND {prefix}storage_class = %s THEN {rate_sql}")
            params += [rule.tier, rule.storage_class, value]
        else:
            whens.append(f"WHEN {prefix}tier = %s THEN {rate_sql}")
            params += [rule.tier, value]
    return f"ROUND({prefix}bytes * CASE {' '.join(whens)} END)", params


def _tier_of_class_sql(location: StorageLocation, column: str) -> tuple[str, list]:
    """SQL mapping a storage class column to a tier the way ``Bucket.tier_of`` does."""
    mapping = dict(DEFAULT_STORAGE_CLASS_TIERS)
    bucket = Bucket.objects.filter(location_id=location.pk).only("storage_class_tiers").first()
    if bucket is not None:
        mapping.update(bucket.storage_class_tiers or {})
    whens = " ".join("WHEN %s THEN %s" for _ in mapping)
    params: list = [v for pair in mapping.items() for v in pair]
    return f"CASE {column} {whens} ELSE %s END", [*params, location.tier]


def _adapt(day: date):
    return connection.ops.adapt_datefield_value(day)


TOTALS = "ckptfleet_usage_totals"


def _present_files(location: StorageLocation, totals: dict[int | None, tuple[int, int]] | None) -> tuple[str, list]:
    """SQL for the location's present files as (copy_id, tier, storage_class, size, files) rows, and its parameters.

    Without ``totals`` that is one row per present shard file. With them (``{copy id or None: (bytes, files)}``,
    the sums an ingest wrote for a location whose files have no tier or storage class of their own, such as a
    host's first inventory) it is one row per copy, written to a temporary table: the same sums, without
    reading the files again.
    """
    if totals is None:
        return (
            "(SELECT copy_id, tier, storage_class, size, 1 AS files FROM catalog_shardfile"
            " WHERE location_id = %s AND gone_at IS NULL)",
            [location.pk],
        )
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {TOTALS}")
        cursor.execute(f"CREATE TEMPORARY TABLE {TOTALS} (copy_id bigint, size bigint NOT NULL, files bigint NOT NULL)")
        rows = [(copy_id, size, files) for copy_id, (size, files) in totals.items() if files]
        if rows:
            cursor.executemany(f"INSERT INTO {TOTALS} (copy_id, size, files) VALUES (%s, %s, %s)", rows)
    return f"(SELECT copy_id, '' AS tier, '' AS storage_class, size, files FROM {TOTALS})", []


def _refresh_rows(
    location: StorageLocation,
    day: date,
    rules: tuple[Rule, ...],
    totals: dict[int | None, tuple[int, int]] | None = None,
) -> None:
    cost, cost_params = cost_sql(rules, day, prefix="g.")
    files, files_params = _present_files(location, totals)
    state = (
        f"CASE WHEN f.copy_id IS NULL THEN '{UsageState.UNCLAIMED}' "
        f"WHEN c.temporary THEN '{UsageState.TEMPORARY}' ELSE c.state END"
    )
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {USAGE} WHERE location_id = %s AND day = %s", [location.pk, _adapt(day)])
        cursor.execute(
            f"""
            INSERT INTO {USAGE} ({_COLUMNS})
            SELECT %s, %s, r.team_id, g.run_id, COALESCE(r.status, ''), g.tier, g.storage_class, g.state,
                   g.bytes, g.files, {cost}, %s
            FROM (
                SELECT k.run_id AS run_id, COALESCE(NULLIF(f.tier, ''), %s) AS tier,
                       f.storage_class AS storage_class, {state} AS state,
                       SUM(f.size) AS bytes, SUM(f.files) AS files
                FROM {files} f
                LEFT JOIN catalog_checkpointcopy c ON c.id = f.copy_id
                LEFT JOIN catalog_checkpoint k ON k.id = c.checkpoint_id
                GROUP BY 1, 2, 3, 4
            ) g
            LEFT JOIN catalog_run r ON r.id = g.run_id
            """,
            [_adapt(day), location.pk, *cost_params, False, location.tier, *files_params],
        )
        if location.kind == LocationKind.BUCKET:
            # Parts of uploads never completed are billed like objects of their storage class.
            storage_class = "COALESCE(NULLIF(UPPER(m.storage_class), ''), 'STANDARD')"
            tier, tier_params = _tier_of_class_sql(location, storage_class)
            cursor.execute(
                f"""
                INSERT INTO {USAGE} ({_COLUMNS})
                SELECT %s, %s, NULL, NULL, '', g.tier, g.storage_class, '{UsageState.MULTIPART}',
                       g.bytes, g.files, {cost}, %s
                FROM (
                    SELECT {tier} AS tier, {storage_class} AS storage_class, SUM(m.bytes) AS bytes, COUNT(*) AS files
                    FROM fleet_multipartupload m
                    WHERE m.location_id = %s AND m.gone_at IS NULL AND m.bytes IS NOT NULL
                    GROUP BY 1, 2
                ) g
                """,
                [_adapt(day), location.pk, *cost_params, False, *tier_params, location.pk],
            )
            _refresh_versions(cursor, location, day, cost, cost_params)
        cursor.execute(f"DELETE FROM {COPY_USAGE} WHERE location_id = %s", [location.pk])
        cursor.execute(
            f"""
            INSERT INTO {COPY_USAGE} (copy_id, location_id, tier, storage_class, bytes, files)
            SELECT f.copy_id, %s, COALESCE(NULLIF(f.tier, ''), %s), f.storage_class, SUM(f.size), SUM(f.files)
            FROM {files} f
            WHERE f.copy_id IS NOT NULL
            GROUP BY f.copy_id, COALESCE(NULLIF(f.tier, ''), %s), f.storage_class
            """,
            [location.pk, location.tier, *files_params, location.tier],
        )
        if totals is not None:
            cursor.execute(f"DROP TABLE {TOTALS}")


def _refresh_versions(cursor, location: StorageLocation, day: date, cost: str, cost_params: list) -> None:
    """Non-current object versions of a versioned bucket (``ObjectVersion``, as the last scan found them).

    Billed like objects of their storage class though no listing shows them. A version is the run's
    whose checkpoint holds (or held) the shard file at its key; otherwise it is unattributed.
    """
    prefix = Bucket.objects.filter(location_id=location.pk).values_list("prefix", flat=True).first() or ""
    storage_class = "COALESCE(NULLIF(UPPER(v.storage_class), ''), 'STANDARD')"
    tier, tier_params = _tier_of_class_sql(location, storage_class)
    cursor.execute(
        f"""
        INSERT INTO {USAGE} ({_COLUMNS})
        SELECT %s, %s, r.team_id, g.run_id, COALESCE(r.status, ''), g.tier, g.storage_class,
               '{UsageState.NONCURRENT}', g.bytes, g.files, {cost}, %s
        FROM (
            SELECT k.run_id AS run_id, {tier} AS tier, {storage_class} AS storage_class,
                   SUM(v.size) AS bytes, COUNT(*) AS files
            FROM fleet_objectversion v
            LEFT JOIN catalog_shardfile f ON f.location_id = v.location_id AND f.path = SUBSTR(v.key, %s)
            LEFT JOIN catalog_checkpointcopy c ON c.id = f.copy_id
            LEFT JOIN catalog_checkpoint k ON k.id = c.checkpoint_id
            WHERE v.location_id = %s AND v.gone_at IS NULL AND NOT v.delete_marker
            GROUP BY 1, 2, 3
        ) g
        LEFT JOIN catalog_run r ON r.id = g.run_id
        """,
        [_adapt(day), location.pk, *cost_params, False, *tier_params, len(prefix) + 1, location.pk],
    )


def _carry(location: StorageLocation, base: date, days: list[date], book: PriceBook) -> None:
    with connection.cursor() as cursor:
        for day in days:
            cost, cost_params = cost_sql(book.rules(location, day), day)
            cursor.execute(f"DELETE FROM {USAGE} WHERE location_id = %s AND day = %s", [location.pk, _adapt(day)])
            cursor.execute(
                f"""
                INSERT INTO {USAGE} ({_COLUMNS})
                SELECT %s, location_id, team_id, run_id,
                       COALESCE((SELECT r.status FROM {RUN} r WHERE r.id = run_id), run_status),
                       tier, storage_class, state, bytes, files, {cost}, %s
                FROM {USAGE} WHERE location_id = %s AND day = %s
                """,
                [_adapt(day), *cost_params, True, location.pk, _adapt(base)],
            )


def _month_sql() -> str:
    """SQL for the first day of the month of a row's ``day``."""
    if connection.vendor == "postgresql":
        return "CAST(date_trunc('month', day) AS date)"
    return "date(day, 'start of month')"


def rollup_months(location_ids: list[int], first: date, last: date, *, run_ids: list[int] | None = None) -> None:
    """Rewrite the monthly rows of these locations for the months from ``first``'s to ``last``'s from their
    daily rows (only those of ``run_ids``, when given). Called after every write of daily rows, inside the
    same transaction."""
    if not location_ids:
        return
    start = first.replace(day=1)
    end = last.replace(day=month_days(last))
    month = _month_sql()
    runs_sql, runs_params = "", []
    if run_ids is not None:
        runs_sql, runs_params = f" AND run_id IN ({', '.join(['%s'] * len(run_ids))})", list(run_ids)
    with connection.cursor() as cursor:
        for i in range(0, len(location_ids), 1000):
            chunk = location_ids[i : i + 1000]
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(
                f"DELETE FROM {MONTHLY} WHERE location_id IN ({marks}) AND month BETWEEN %s AND %s{runs_sql}",
                [*chunk, _adapt(start), _adapt(end), *runs_params],
            )
            cursor.execute(
                f"""
                INSERT INTO {MONTHLY} (month, {_GROUP}, {_MONTH_SUMS})
                SELECT {month}, {_GROUP}, {_MONTH_SUMS_SQL}
                FROM {USAGE} WHERE location_id IN ({marks}) AND day BETWEEN %s AND %s{runs_sql}
                GROUP BY {month}, {_GROUP}
                """,
                [*chunk, _adapt(start), _adapt(end), *runs_params],
            )


def usage_monthly_rebuild() -> int:
    """Rewrite every monthly row from the daily rows (for data written outside this module, e.g. a
    benchmark's generator); returns the rows written."""
    month = _month_sql()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {MONTHLY}")
        cursor.execute(
            f"""
            INSERT INTO {MONTHLY} (month, {_GROUP}, {_MONTH_SUMS})
            SELECT {month}, {_GROUP}, {_MONTH_SUMS_SQL}
            FROM {USAGE} GROUP BY {month}, {_GROUP}
            """
        )
        return cursor.rowcount


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def usage_refresh(
    *,
    location: StorageLocation,
    day: date,
    now: datetime | None = None,
    totals: dict[int | None, tuple[int, int]] | None = None,
) -> date:
    """Rewrite ``location``'s usage rows of UTC ``day`` from its present files; returns the day written.

    ``totals`` are the present files' bytes and count per copy (None: files no copy claims) when the caller
    has just written every one of them and none has a tier or storage class of its own (``_present_files``).

    Runs inside the caller's transaction (the ingest holds the location's row lock). Days between
    the location's last rolled-up day and ``day`` are first carried forward from it. A day older
    than the last rolled-up one is not rewritten: the newest state lands on the newest day, so
    later days never show an older state than earlier ones.
    """
    now = now or timezone.now()
    with transaction.atomic():
        cursor = UsageCursor.objects.select_for_update(of=("self",)).filter(location_id=location.pk).first()
        if cursor is not None and day < cursor.day:
            day = cursor.day
        book = PriceBook.load(until=day)
        if cursor is not None and cursor.day < day - timedelta(days=1):
            _carry(location, cursor.day, _days(cursor.day + timedelta(days=1), day - timedelta(days=1)), book)
        _refresh_rows(location, day, book.rules(location, day), totals)
        first = min(cursor.day + timedelta(days=1), day) if cursor is not None else day
        rollup_months([location.pk], first, day)
        UsageCursor.objects.update_or_create(
            location_id=location.pk, defaults={"day": day, "refreshed_day": day, "refreshed_at": now}
        )
    return day


# The states of usage rows that come from a copy's own state (``_refresh_rows``): the ones a verdict moves.
COPY_STATES = (UsageState.COMPLETE, UsageState.PARTIAL, UsageState.CORRUPT, UsageState.TEMPORARY)
RESTATE_RUNS = 500  # runs per statement when today's rows of one location are rewritten


def location_rejudged(location: StorageLocation, now: datetime) -> None:
    """Today's usage rows of ``location`` follow its copies, just judged again (after a deletion job)."""
    usage_refresh(location=location, day=now.astimezone(UTC).date(), now=now)


def copies_restated(copy_ids: Iterable[int], *, today: date | None = None) -> int:
    """Today's usage rows follow the state of these copies, just changed by a verdict; returns the rows written.

    Call it in the transaction that wrote the verdicts (``catalog.verification.checkpoints_verify``), with
    the ids of the copies whose ``state`` or ``temporary`` changed; copies at any location, several
    locations at once. For every location holding one of them, the rows of today (UTC, or the location's
    last rolled-up day if later) of the runs of those copies are rewritten, by state, from ``CopyTierUsage``
    joined to the copies' current state, and that month's row is rolled up again. A location behind today
    is first carried forward, so earlier days keep the state they had. A location never rolled up has no
    rows to move: its first refresh writes them. Idempotent; a set-based statement or two per location,
    never a read of shard files. Takes each location's ``UsageCursor`` row lock, in location order.
    """
    ids = sorted(set(copy_ids))
    if not ids:
        return 0
    runs_at: dict[int, set[int]] = defaultdict(set)
    for i in range(0, len(ids), 1000):
        for location_id, run_id in (
            CheckpointCopy.objects.filter(pk__in=ids[i : i + 1000])
            .values_list("location_id", "checkpoint__run_id")
            .distinct()
            .order_by()
        ):
            runs_at[location_id].add(run_id)
    today = today or utc_today()
    written = 0
    with transaction.atomic():
        cursors = list(
            UsageCursor.objects.select_for_update(of=("self",)).filter(location_id__in=list(runs_at)).order_by("pk")
        )
        if not cursors:
            return 0
        locations = StorageLocation.objects.in_bulk([c.location_id for c in cursors])
        book = PriceBook.load(until=max(today, *(c.day for c in cursors)))
        for cursor in cursors:
            location = locations[cursor.location_id]
            day = max(today, cursor.day)
            first = day
            if cursor.day < day:
                first = cursor.day + timedelta(days=1)
                _carry(location, cursor.day, _days(first, day), book)
                UsageCursor.objects.filter(pk=cursor.pk).update(day=day)
            runs = sorted(runs_at[location.pk])
            for i in range(0, len(runs), RESTATE_RUNS):
                chunk = runs[i : i + RESTATE_RUNS]
                written += _restate_rows(location, day, book.rules(location, day), chunk, cursor.refreshed_day != day)
                if first == day:  # only these runs' rows changed: only their month rows are rolled up again
                    rollup_months([location.pk], day, day, run_ids=chunk)
            if first != day:  # carried: every run's rows of the new days
                rollup_months([location.pk], first, day)
    return written


def _restate_rows(location: StorageLocation, day: date, rules: tuple[Rule, ...], runs: list[int], carried: bool) -> int:
    """Rewrite the copy-state rows of ``runs`` at ``location`` on ``day`` from ``CopyTierUsage`` and the copies'
    current state: the rows ``_refresh_rows`` would write from the files, as they were at the last refresh."""
    cost, cost_params = cost_sql(rules, day, prefix="g.")
    runs_in = ", ".join(["%s"] * len(runs))
    states_in = ", ".join(["%s"] * len(COPY_STATES))
    state = f"CASE WHEN c.temporary THEN '{UsageState.TEMPORARY}' ELSE c.state END"
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {USAGE} WHERE location_id = %s AND day = %s AND run_id IN ({runs_in})"
            f" AND state IN ({states_in})",
            [location.pk, _adapt(day), *runs, *COPY_STATES],
        )
        cursor.execute(
            f"""
            INSERT INTO {USAGE} ({_COLUMNS})
            SELECT %s, %s, r.team_id, g.run_id, COALESCE(r.status, ''), g.tier, g.storage_class, g.state,
                   g.bytes, g.files, {cost}, %s
            FROM (
                SELECT k.run_id AS run_id, u.tier AS tier, u.storage_class AS storage_class, {state} AS state,
                       SUM(u.bytes) AS bytes, SUM(u.files) AS files
                FROM {COPY_USAGE} u
                JOIN catalog_checkpointcopy c ON c.id = u.copy_id
                JOIN catalog_checkpoint k ON k.id = c.checkpoint_id
                WHERE u.location_id = %s AND k.run_id IN ({runs_in})
                GROUP BY 1, 2, 3, 4
            ) g
            LEFT JOIN catalog_run r ON r.id = g.run_id
            """,
            [_adapt(day), location.pk, *cost_params, carried, location.pk, *runs],
        )
        return cursor.rowcount


def run_status_changed(run_id: int, status: str, *, today: date | None = None) -> int:
    """The run's rows of today (UTC) and later carry its new status; returns the rows changed.

    Called in the transaction of the change (``catalog.lifecycle``, through ``catalog.hooks``). Earlier days keep
    the status the run had then, so ending a run today does not turn last month's NVMe spend into waste. A
    location not yet rolled up to today takes the new status when it is carried forward (``_carry`` reads the
    run's status as it is then)."""
    today = today or utc_today()
    rows = UsageDaily.objects.filter(run_id=run_id, day__gte=today).exclude(run_status=status)
    touched = sorted(set(rows.values_list("location_id", flat=True)))
    if not touched:
        return 0
    changed = rows.update(run_status=status)
    last = UsageDaily.objects.filter(run_id=run_id, day__gte=today).order_by("-day").values_list("day", flat=True)[0]
    rollup_months(touched, today, last, run_ids=[run_id])
    return changed


def usage_carry_forward(*, location_id: int, through: date) -> int:
    """Carry one location's last rolled-up day forward to ``through``; returns the days written.

    Idempotent: a location already rolled up through ``through`` is left alone. Takes the same lock
    as an ingest of the location, so the two never interleave.
    """
    with transaction.atomic():
        location = StorageLocation.objects.locked().filter(pk=location_id).first()
        cursor = UsageCursor.objects.select_for_update(of=("self",)).filter(location_id=location_id).first()
        if location is None or cursor is None or cursor.day >= through:
            return 0
        days = _days(cursor.day + timedelta(days=1), through)
        _carry(location, cursor.day, days, PriceBook.load(until=through))
        rollup_months([location.pk], days[0], through)
        UsageCursor.objects.filter(location_id=location_id).update(day=through)
    return len(days)


def usage_carry_forward_all(*, through: date | None = None) -> dict[str, int]:
    """Carry every location that has fallen behind forward to ``through`` (today, UTC): beat's hourly job."""
    through = through or utc_today()
    behind = list(UsageCursor.objects.filter(day__lt=through).values_list("location_id", flat=True))
    days = sum(usage_carry_forward(location_id=pk, through=through) for pk in behind)
    return {"locations": len(behind), "days": days}


def usage_reprice(*, location_ids: list[int], since: date) -> int:
    """Price again the rows of these locations from ``since`` on; returns the rows updated.

    Called when a price point is added for a day already rolled up. Days are grouped into runs of
    days with the same prices and month, and locations with the same prices share a statement, so
    a change for a thousand alike hosts is a handful of UPDATEs, not one per host and day.
    """
    if not location_ids:
        return 0
    cursors = dict(
        UsageCursor.objects.filter(location_id__in=location_ids, day__gte=since).values_list("location_id", "day")
    )
    if not cursors:
        return 0
    locations = list(StorageLocation.objects.filter(pk__in=list(cursors)).only("pk", "kind", "host_id", "tier"))
    book = PriceBook.load(until=max(cursors.values()))
    groups: dict[tuple, list[int]] = defaultdict(list)
    for location in locations:
        end = cursors[location.pk]
        breaks = set(book.changes(location, since, end))
        month = since.replace(day=1)
        while (month := (month + timedelta(days=32)).replace(day=1)) <= end:
            breaks.add(month)
        starts = sorted(breaks)
        for i, first in enumerate(starts):
            last = starts[i + 1] - timedelta(days=1) if i + 1 < len(starts) else end
            rules = book.rules(location, first)
            key = (tuple((r.tier, r.storage_class, r.price) for r in rules), first, last)
            groups[key].append(location.pk)
    updated = 0
    with connection.cursor() as cursor:
        for (_, first, last), ids in groups.items():
            sample = next(loc for loc in locations if loc.pk == ids[0])
            cost, params = cost_sql(book.rules(sample, first), first)
            for i in range(0, len(ids), 1000):
                chunk = ids[i : i + 1000]
                marks = ", ".join(["%s"] * len(chunk))
                cursor.execute(
                    f"UPDATE {USAGE} SET cost_nanos = {cost} WHERE location_id IN ({marks}) AND day BETWEEN %s AND %s",
                    [*params, *chunk, _adapt(first), _adapt(last)],
                )
                updated += cursor.rowcount
    rollup_months(sorted(cursors), since, max(cursors.values()))
    return updated
