"""The staged way: merge a fully staged snapshot into ``catalog_shardfile`` in set-based SQL (update
changed, mark gone), judge every run directory it touched from the staged rows, and insert the new rows
already linked to their copy, in one transaction (``apply_staged``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from catalog.formats.base import FileEntry
from catalog.layout import sqlite_epoch
from catalog.models import IngestRow, ShardFile
from catalog.services import GroupFile, Judge
from fleet.models import Inventory, StorageLocation
from ingest.inventory.apply import MergeCounts, end_apply, flush_every, log_applied
from ingest.inventory.rows import SHARD_COLUMNS, STAGED_COLUMNS
from ingest.inventory.staging import unstage

# Table and column names in these statements come from model metadata and constants, never from input;
# values are parameters (hence the S608 noqa).


def merge(inventory: Inventory, location: StorageLocation, *, now: datetime) -> MergeCounts:
    """Update the location's changed shard files and mark the gone ones, from the staged snapshot.

    Runs inside the caller's transaction. Only rows whose facts differ are written, so the same
    inventory applied twice writes nothing. New rows are not inserted here: they are inserted with
    the copy they belong to once their run directory is judged (``_Links``); ``added`` is 0.
    """
    files = "catalog_shardfile"
    staged = IngestRow._meta.db_table
    inv, loc = inventory.pk, location.pk
    adapt = connection.ops.adapt_datetimefield_value
    previous_seen = adapt(location.last_applied_at or now)
    now = adapt(now)
    first = _first_checksum_sql(files)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {files} SET size = s.size, mtime = s.mtime, checksum = s.checksum,
                   checksum_algo = s.checksum_algo, facts = s.facts, storage_class = s.storage_class,
                   tier = s.tier, etag = s.etag, version_id = s.version_id, legal_hold = s.legal_hold,
                   retain_until = s.retain_until, digests = s.digests, first_checksum = {first},
                   changed_at = %s,
                   gone_at = NULL, last_seen_at = NULL, changed_by_id = %s
            FROM {staged} s
            WHERE s.inventory_id = %s AND {files}.location_id = %s AND {files}.path = s.path
              AND ({files}.size <> s.size OR {files}.mtime <> s.mtime OR {files}.gone_at IS NOT NULL
                   OR {files}.checksum <> s.checksum OR {files}.checksum_algo <> s.checksum_algo
                   OR ({files}.facts IS NULL) <> (s.facts IS NULL) OR {files}.facts <> s.facts
                   OR {files}.storage_class <> s.storage_class OR {files}.tier <> s.tier
                   OR {files}.etag <> s.etag OR {files}.version_id <> s.version_id
                   OR ({files}.legal_hold IS NULL) <> (s.legal_hold IS NULL) OR {files}.legal_hold <> s.legal_hold
                   OR ({files}.retain_until IS NULL) <> (s.retain_until IS NULL)
                   OR {files}.retain_until <> s.retain_until
                   OR ({files}.digests IS NULL) <> (s.digests IS NULL) OR {files}.digests <> s.digests)
            """,
            [now, inv, inv, loc],
        )
        changed = cursor.rowcount
        cursor.execute(
            f"""
            UPDATE {files} SET gone_at = %s, last_seen_at = %s, changed_at = %s, changed_by_id = %s
            WHERE location_id = %s AND gone_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM {staged} s WHERE s.inventory_id = %s AND s.path = {files}.path)
            """,
            [now, previous_seen, now, inv, loc, inv],
        )
        gone = cursor.rowcount
    return MergeCounts(added=0, changed=changed, gone=gone)


def _first_checksum_sql(files: str) -> str:
    """The new ``first_checksum`` of a changed row (the old row's values are the table's, the new ones ``s``'s).

    A content checksum that changes while the size and mtime stay the same is the file's content changing
    under it: the checksum it had first is kept (an earlier one, if one is kept already), with when it was
    taken, for as long as the size and mtime stay; a new size or mtime is a new file, and forgets it.
    """
    pg = connection.vendor == "postgresql"
    build = (
        f"jsonb_build_object('algo', {files}.checksum_algo, 'digest', {files}.checksum, 'at', {files}.digests->'at')"
        if pg
        else f"json_object('algo', {files}.checksum_algo, 'digest', {files}.checksum, 'at', "
        f"json_extract({files}.digests, '$.at'))"
    )
    same = f"{files}.size = s.size AND {files}.mtime = s.mtime"
    return f"""CASE
        WHEN {same} AND {files}.checksum <> '' AND s.checksum <> '' AND {files}.checksum_algo = s.checksum_algo
             AND {files}.checksum <> s.checksum THEN COALESCE({files}.first_checksum, {build})
        WHEN {same} THEN {files}.first_checksum
        ELSE NULL END"""


class _Links:
    """The files of judged run directories waiting to be written: new ones with their copy, and
    stored ones whose copy changed. ``flush`` writes them in three set-based statements through a
    temporary table (COPY on PostgreSQL), so every new row is written once, already linked."""

    TABLE = "ckptfleet_ingest_link"

    def __init__(self, inventory: Inventory, location: StorageLocation, now: datetime) -> None:
        self.inv, self.loc = inventory.pk, location.pk
        self.now = connection.ops.adapt_datetimefield_value(now)
        self.rows: list[tuple[str, int | None, bool]] = []
        self.added = 0
        pg = connection.vendor == "postgresql"
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
            path = 'text COLLATE "C"' if pg else "text"
            cursor.execute(f"CREATE TEMPORARY TABLE {self.TABLE} (path {path} NOT NULL, copy_id bigint, new boolean)")

    def add(self, path: str, copy_id: int | None, *, new: bool) -> None:
        self.rows.append((path, copy_id, new))

    def flush(self) -> None:
        if not self.rows:
            return
        links, files, staged = self.TABLE, ShardFile._meta.db_table, IngestRow._meta.db_table
        columns = ", ".join(SHARD_COLUMNS)
        staged_columns = ", ".join(f"s.{c}" for c in STAGED_COLUMNS)
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                with cursor.cursor.copy(f"COPY {links} (path, copy_id, new) FROM STDIN") as copy:
                    for row in self.rows:
                        copy.write_row(row)
            else:
                cursor.executemany(f"INSERT INTO {links} (path, copy_id, new) VALUES (%s, %s, %s)", self.rows)
            cursor.execute(
                f"""
                INSERT INTO {files} (location_id, {columns})
                SELECT %s, {staged_columns}, %s, %s, %s, l.copy_id
                FROM {links} l JOIN {staged} s ON s.inventory_id = %s AND s.path = l.path
                WHERE l.new
                """,
                [self.loc, self.now, self.now, self.inv, self.inv],
            )
            self.added += cursor.rowcount
            cursor.execute(
                f"""
                UPDATE {files} SET copy_id = l.copy_id FROM {links} l
                WHERE {files}.location_id = %s AND {files}.path = l.path AND NOT l.new
                """,
                [self.loc],
            )
            cursor.execute(f"DELETE FROM {links}")
        self.rows = []

    def close(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {self.TABLE}")


def _new_paths(inventory: Inventory, location: StorageLocation) -> Iterator[str]:
    """Staged paths that have no shard-file row at the location yet."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT s.path FROM {IngestRow._meta.db_table} s
            WHERE s.inventory_id = %s
              AND NOT EXISTS (SELECT 1 FROM {ShardFile._meta.db_table} f WHERE f.location_id = %s AND f.path = s.path)
            """,
            [inventory.pk, location.pk],
        )
        while rows := cursor.fetchmany(5000):
            for (path,) in rows:
                yield path


def staged_group(inventory: Inventory, location: StorageLocation, template, group: str) -> list:
    """The staged files of one run directory, with what the location stores for each (if anything)."""

    depth = len(group.split("/")) if group else 0
    shallow = depth < template.depth
    where = ["s.inventory_id = %s"]
    params: list = [location.pk, inventory.pk]
    if group:
        where.append("s.path >= %s AND s.path < %s")
        params += [group + "/", group + "0"]  # '0' is the byte after '/': the subtree is one range
    pg = connection.vendor == "postgresql"
    mtime, facts, digests, first = (
        ("extract(epoch FROM s.mtime)::float8", "s.facts::text", "s.digests::text", "f.first_checksum::text")
        if pg
        else ("s.mtime", "s.facts", "s.digests", "f.first_checksum")
    )
    sql = f"""
        SELECT s.path, s.size, {mtime}, {facts}, s.checksum, s.checksum_algo, f.id, f.copy_id, {digests}, {first}
        FROM {IngestRow._meta.db_table} s
        LEFT JOIN {ShardFile._meta.db_table} f ON f.location_id = %s AND f.path = s.path
        WHERE {" AND ".join(where)}
    """
    epoch = float if pg else sqlite_epoch
    out = []
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        while rows := cursor.fetchmany(5000):
            for path, size, when, facts_text, checksum, algo, file_id, copy_id, digests_value, first_value in rows:
                if shallow and template.group_of(path) != group:
                    continue
                entry = FileEntry(
                    path=path,
                    size=size,
                    mtime=epoch(when),
                    facts=json.loads(facts_text) if facts_text else None,
                    checksum=checksum or None,
                    checksum_algo=algo or None,
                    digests=digests_value or None,
                    first=first_value or None,
                )
                out.append(GroupFile(entry, file_id is not None, copy_id))
    return out


def _write_links(links: _Links, files: list, targets: dict[str, int | None]) -> None:
    for f in files:
        target = targets.get(f.entry.path)
        if not f.stored:
            links.add(f.entry.path, target, new=True)
        elif f.copy_id != target:
            links.add(f.entry.path, target, new=False)


def apply_staged(inventory: Inventory, *, files: int, total: int, started: float) -> Inventory:
    """Merge a fully staged snapshot, judge what it touched, and mark the inventory applied, in one transaction.

    Changed and gone rows are updated first; then every run directory with a new, changed or gone
    file is judged from the staged rows, and its new files are inserted already linked to their copy.
    """

    location = inventory.location
    try:
        with transaction.atomic():
            # One inventory of a location is merged at a time; a newer snapshot waits for an older one.
            location = StorageLocation.objects.locked().get(pk=location.pk)
            now = timezone.now()
            t1 = time.monotonic()
            if connection.vendor == "postgresql":
                # Fresh statistics on the staged rows let the planner pick hash joins for the merge
                # instead of a million index probes (seconds at 1M rows; the ANALYZE costs ~0.2 s).
                with connection.cursor() as cursor:
                    cursor.execute(f"ANALYZE {IngestRow._meta.db_table}")
            counts = merge(inventory, location, now=now)
            judge = Judge(location, now=now)
            template = judge.template
            groups = {template.group_of(p) for p in _new_paths(inventory, location)}
            changed = ShardFile.objects.filter(location=location, changed_by=inventory)
            groups.update(template.group_of(p) for p in changed.values_list("path", flat=True).iterator(5000))
            t2 = time.monotonic()
            links = _Links(inventory, location, now)
            for group in sorted(groups):
                group_files = staged_group(inventory, location, template, group)
                targets = judge.group(group, [f.entry for f in group_files])
                _write_links(links, group_files, judge.keep_protected(group_files, targets))
                if judge.pending_files >= flush_every():
                    links.flush()
                    judge.verify()
            end_apply(inventory, location, links, judge, now=now, files=files, total=total, counts=counts)
            t3 = time.monotonic()
    finally:
        unstage(inventory.pk)
    log_applied(inventory, "staged", files, counts, judge.found, started, t1, t2, t3)
    inventory.refresh_from_db()
    return inventory
