"""The apply of a first snapshot whose run directories were recognised while listing (``apply_first``)."""

from __future__ import annotations

import time
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from catalog.formats.base import FileEntry
from catalog.models import IngestRow, ShardFile
from catalog.services import Judge
from fleet.models import (
    Inventory,
    StorageLocation,
)
from ingest.inventory.apply import MergeCounts, end_apply, flush_every, log_applied
from ingest.inventory.rows import STAGED_COLUMNS
from ingest.inventory.staged import apply_staged, staged_group
from ingest.inventory.staging import unstage
from ingest.scan.prejudge import PreJudge


class _NewFiles:
    """The staged rows of judged run directories, inserted into the shard files already linked to their copy.

    A batch's ``(path, copy id)`` go into a temporary table (COPY on PostgreSQL); one ``INSERT ... SELECT``
    joins them to the staged rows, read by the range of the batch's paths on the staged rows' (inventory,
    path) index, so that each batch costs its own rows, not a pass over the whole snapshot.
    """

    TABLE = "ckptfleet_scan_new_file"

    def __init__(self, inventory: Inventory, location: StorageLocation, now: datetime) -> None:
        self.inv, self.loc = inventory.pk, location.pk
        self.now = connection.ops.adapt_datetimefield_value(now)
        self.rows: list[tuple[str, int | None]] = []
        self.added = 0
        self.pg = connection.vendor == "postgresql"
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
            path = 'text COLLATE "C"' if self.pg else "text"
            cursor.execute(f"CREATE TEMPORARY TABLE {self.TABLE} (path {path} NOT NULL, copy_id bigint)")

    def add(self, path: str, copy_id: int | None) -> None:
        self.rows.append((path, copy_id))

    def flush(self) -> None:
        if not self.rows:
            return

        low = min(path for path, _ in self.rows)
        high = max(path for path, _ in self.rows)
        files, staged = ShardFile._meta.db_table, IngestRow._meta.db_table
        columns = ", ".join((*STAGED_COLUMNS, "first_seen_at", "changed_at", "changed_by_id", "copy_id"))
        staged_columns = ", ".join(f"s.{c}" for c in STAGED_COLUMNS)
        # Table and column names come from model metadata and constants, never from input.
        links = self.TABLE
        insert = (
            f"INSERT INTO {files} (location_id, {columns}) "  # noqa: S608
            f"SELECT %s, {staged_columns}, %s, %s, %s, l.copy_id "
            f"FROM {links} l JOIN {staged} s ON s.inventory_id = %s AND s.path = l.path "
            "WHERE s.path >= %s AND s.path <= %s"
        )
        with connection.cursor() as cursor:
            if self.pg:
                with cursor.cursor.copy(f"COPY {links} (path, copy_id) FROM STDIN") as copy:
                    for row in self.rows:
                        copy.write_row(row)
            else:
                cursor.executemany(f"INSERT INTO {links} (path, copy_id) VALUES (%s, %s)", self.rows)  # noqa: S608
            cursor.execute(insert, [self.loc, self.now, self.now, self.inv, self.inv, low, high])
            self.added += cursor.rowcount
            cursor.execute(f"TRUNCATE {links}" if self.pg else f"DELETE FROM {links}")  # noqa: S608
        self.rows = []

    def close(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {self.TABLE}")


def apply_first(inventory: Inventory, prejudged: PreJudge, *, files: int, total: int, started: float) -> Inventory:
    """``ingest.inventory.apply_staged`` for a location's first snapshot whose run directories were recognised
    while listing: in one transaction, the copies are written and the staged rows inserted linked to them.

    Every staged path is new (the location has no shard-file rows, checked under its lock), so there
    is nothing to merge and nothing gone, and every run directory of the snapshot is judged, as
    ``apply_staged`` would; those recognised while listing are not read back nor recognised again.
    """

    location = inventory.location
    try:
        with transaction.atomic():
            location = StorageLocation.objects.locked().get(pk=location.pk)
            now = timezone.now()
            t1 = time.monotonic()
            judge = Judge(location, now=now)
            if judge.template != prejudged.template or ShardFile.objects.filter(location=location).exists():
                # Not a first snapshot after all (or the layout changed meanwhile): the general path.
                return apply_staged(inventory, files=files, total=total, started=started)
            template = judge.template
            counts = MergeCounts(added=0, changed=0, gone=0)
            t2 = time.monotonic()
            links = _NewFiles(inventory, location, now)
            results = prejudged.results
            # Run directories are judged a batch at a time (their runs, checkpoints and copies written
            # together), the links and verification of a batch written before the next one.
            batch: list[tuple[str, list[FileEntry], list | None]] = []
            size = 0

            def judge_batch() -> None:
                judged = judge.groups(batch)
                for (_, entries, _), targets in zip(batch, judged, strict=True):
                    for entry in entries:  # every file is new: the location had none
                        links.add(entry.path, targets.get(entry.path))
                batch.clear()

            for group in sorted(prejudged.groups):
                done = results.pop(group, None)
                if done is not None:
                    batch.append((group, done[0].entries(), done[1]))
                    size += len(done[0])
                else:
                    entries = [f.entry for f in staged_group(inventory, location, template, group)]
                    batch.append((group, entries, None))
                    size += len(entries)
                if size >= flush_every():
                    judge_batch()
                    links.flush()
                    judge.verify()
                    size = 0
            judge_batch()
            end_apply(inventory, location, links, judge, now=now, files=files, total=total, counts=counts)
            t3 = time.monotonic()
    finally:
        unstage(inventory.pk)
    log_applied(inventory, "prejudged", files, counts, judge.found, started, t1, t2, t3)
    inventory.refresh_from_db()
    return inventory
