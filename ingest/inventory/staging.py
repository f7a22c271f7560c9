"""Staging rows into ``IngestRow`` in bulk (COPY on PostgreSQL, batched INSERTs on SQLite), and emptying them.

Memory is bounded by one chunk of ``INGEST_CHUNK_ROWS``, whatever the size of the inventory."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import nullcontext

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction

from catalog.models import IngestRow
from fleet.models import Inventory
from ingest.inventory.lines import read_inventory
from ingest.inventory.rows import STAGED_COLUMNS, InventoryError, Row

# Table and column names in these statements come from model metadata and constants, never from input;
# values are parameters (hence the S608 noqa).


def _chunks(rows: Iterator[Row], size: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _stage_sqlite(cursor, inventory_id: int, chunk: list[Row]) -> None:
    table = IngestRow._meta.db_table
    cols = ", ".join(("inventory_id", *STAGED_COLUMNS))
    adapt = connection.ops.adapt_datetimefield_value
    marks = ", ".join(["%s"] * (len(STAGED_COLUMNS) + 1))
    cursor.executemany(f"INSERT INTO {table} ({cols}) VALUES ({marks})", [r.values(inventory_id, adapt) for r in chunk])


def _same(value):
    return value


def stage(inventory: Inventory, stream, header: dict | None = None) -> tuple[int, int]:
    """Parse and stage every row of an uploaded inventory. Raises InventoryError; nothing is applied then."""
    return stage_rows(inventory, read_inventory(stream, max_line=settings.INVENTORY_MAX_LINE, header=header))


# A staging transaction is committed after this many chunks or seconds, whichever comes first: one
# long COPY keeps PostgreSQL busy on its own core while Python parses, and the progress stays fresh.
STAGE_COMMIT_CHUNKS = 20
STAGE_COMMIT_SECONDS = 5.0


def stage_rows(inventory: Inventory, rows: Iterable[Row], *, progress=None) -> tuple[int, int]:
    """Stage rows (one COPY per transaction of up to ``STAGE_COMMIT_CHUNKS`` chunks on PostgreSQL).

    Memory is bounded by one chunk of ``INGEST_CHUNK_ROWS``. ``progress(files, bytes)`` is called
    after each commit.
    """
    files = 0
    total = 0
    chunks = _chunks(iter(rows), settings.INGEST_CHUNK_ROWS)
    table = IngestRow._meta.db_table
    cols = ", ".join(("inventory_id", *STAGED_COLUMNS))
    # SQLite: a transaction per chunk, so that a duplicate is found among the committed rows.
    per_commit = STAGE_COMMIT_CHUNKS if connection.vendor == "postgresql" else 1
    done = False
    while not done:
        last: list[Row] = []
        staged = 0
        try:
            with (
                transaction.atomic(),
                connection.cursor() as cursor,
                (
                    cursor.cursor.copy(f"COPY {table} ({cols}) FROM STDIN")
                    if connection.vendor == "postgresql"
                    else nullcontext()
                ) as copy,
            ):
                started = time.monotonic()
                for n, chunk in enumerate(chunks, start=1):
                    last = chunk
                    if copy is not None:
                        for r in chunk:
                            copy.write_row(r.values(inventory.pk, _same))
                    else:
                        _stage_sqlite(cursor, inventory.pk, chunk)
                    staged += len(chunk)
                    total += sum(r.size for r in chunk)
                    if n >= per_commit or time.monotonic() - started >= STAGE_COMMIT_SECONDS:
                        break
                else:
                    done = True
        except (IntegrityError, connection.Database.IntegrityError) as exc:
            # COPY raises the driver's own error, not Django's wrapper.
            dupe = _duplicate_from_error(exc, inventory.pk) or _first_duplicate(inventory.pk, [r.path for r in last])
            raise InventoryError(None, f"the path {dupe!r} is reported more than once") from None
        files += staged
        if progress is not None and staged:
            progress(files, total)
    return files, total


def _duplicate_from_error(exc: BaseException, inventory_id: int) -> str | None:
    """The path PostgreSQL names in a unique violation of (inventory_id, path), if it names one."""
    cause = exc.__cause__ if isinstance(exc, IntegrityError) and exc.__cause__ is not None else exc
    detail = getattr(getattr(cause, "diag", None), "message_detail", None) or ""
    head, tail = f"Key (inventory_id, path)=({inventory_id}, ", ") already exists."
    if detail.startswith(head) and detail.endswith(tail):
        return detail[len(head) : -len(tail)]
    return None


def _first_duplicate(inventory_id: int, paths: list[str]) -> str:
    seen: set[str] = set()
    for p in paths:
        if p in seen:
            return p
        seen.add(p)
    staged = set(
        IngestRow.objects.filter(inventory_id=inventory_id, path__in=paths[:5000]).values_list("path", flat=True)
    )
    return next((p for p in paths if p in staged), paths[0] if paths else "?")


def unstage(inventory_id: int) -> None:
    """Empty the staging rows of one inventory: TRUNCATE when nothing else is staged (PostgreSQL), else DELETE.

    TRUNCATE leaves no dead rows behind (a million per inventory otherwise, until a vacuum) but needs
    the table to itself: it is tried only outside a transaction, without waiting for the lock.
    """
    table = IngestRow._meta.db_table
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE NOWAIT")
                cursor.execute(f"SELECT 1 FROM {table} WHERE inventory_id <> %s LIMIT 1", [inventory_id])
                if cursor.fetchone() is None:
                    cursor.execute(f"TRUNCATE {table}")
                    return
        except DatabaseError:
            pass  # somebody else uses the table now: delete our rows instead
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE inventory_id = %s", [inventory_id])
