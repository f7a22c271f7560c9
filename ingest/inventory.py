"""Applying an inventory: validate every line, stage it in bulk, then merge it in set-based SQL.

The flow keeps the promise that bad input changes nothing: the whole upload is parsed and staged
before anything touches the catalog, and the merge of staged rows into ``catalog_shardfile`` is
three statements in one transaction (update changed, insert new, mark gone). Staging uses COPY on
PostgreSQL and batched INSERTs on SQLite, in chunks of ``INGEST_CHUNK_ROWS``; memory is bounded by
one chunk, whatever the size of the inventory.

A location's first inventory, sorted by path as the agent sends it, takes a shorter way
(``_ingest_direct``): it is read in one pass, each run directory judged as soon as its last file has
passed, and its rows written straight into ``catalog_shardfile`` with their copies (COPY on
PostgreSQL, from a second thread, while the next run directories are read), in one transaction.
Anything that way does not take as it is (every invalid line among it) goes the line-by-line way,
which names the line and the reason.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import json
import logging
import math
import re
import time
import zlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import orjson
from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from catalog.digests import dumps as digests_dumps
from catalog.digests import from_line
from catalog.models import CheckpointCopy, IngestRow, ShardFile
from ckptfleet.celery import task
from fleet.choices import InventorySource, InventoryStatus
from fleet.models import Inventory, StorageLocation

log = logging.getLogger(__name__)

MAX_PATH_BYTES = 4096
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_HEX = re.compile(r"^[0-9a-f]{64}$")


class InventoryError(Exception):
    """A reason to reject the whole inventory, with the 1-based line it was found on."""

    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(f"line {line}: {reason}" if line else reason)
        self.line = line
        self.reason = reason


@dataclass(slots=True)
class Row:
    """One file or object, ready to stage. Host inventories leave the object fields empty."""

    path: str
    size: int
    mtime: datetime
    checksum: str = ""
    checksum_algo: str = ""
    facts: str | None = None  # canonical JSON text, or None
    storage_class: str = ""
    tier: str = ""
    etag: str = ""
    version_id: str = ""
    legal_hold: bool | None = None
    retain_until: datetime | None = None
    digests: str | None = None  # canonical JSON text of catalog.digests, or None

    def values(self, inventory_id: int, adapt) -> tuple:
        return (
            inventory_id,
            self.path,
            self.size,
            adapt(self.mtime),
            self.checksum,
            self.checksum_algo,
            self.facts,
            self.storage_class,
            self.tier,
            self.etag,
            self.version_id,
            self.legal_hold,
            adapt(self.retain_until) if self.retain_until else None,
            self.digests,
        )


STAGED_COLUMNS = (
    "path",
    "size",
    "mtime",
    "checksum",
    "checksum_algo",
    "facts",
    "storage_class",
    "tier",
    "etag",
    "version_id",
    "legal_hold",
    "retain_until",
    "digests",
)


def check_path(path: object) -> str:
    """Return ``path`` if it is a safe relative path below a root, else raise ValueError saying why."""
    if not isinstance(path, str) or not path:
        raise ValueError("path must be a non-empty string")
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise ValueError(f"path is longer than {MAX_PATH_BYTES} bytes")
    if _CONTROL.search(path):
        raise ValueError("path contains a NUL or control character")
    if path.startswith("/"):
        raise ValueError("path must be relative to the root, not absolute")
    if "\\" in path:
        raise ValueError("path contains a backslash")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(f"path has an empty, '.' or '..' component: {path!r}")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("path is not valid UTF-8") from None
    return path


def _parse_file_line(obj: dict) -> Row:
    path = check_path(obj.get("path"))
    size = obj.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0 or size >= 2**63:
        raise ValueError("size must be a non-negative integer")
    mtime = obj.get("mtime")
    if not isinstance(mtime, (int, float)) or isinstance(mtime, bool) or not math.isfinite(mtime):
        raise ValueError("mtime must be a number of seconds since the epoch")
    try:
        when = datetime.fromtimestamp(mtime, UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError("mtime is out of range") from None
    checksum, algo = "", ""
    sha = obj.get("sha256")
    if sha is not None:
        if not isinstance(sha, str) or not _HEX.match(sha):
            raise ValueError("sha256 must be 64 lowercase hex digits")
        checksum, algo = sha, "sha256"
    facts = obj.get("facts")
    facts_text = None
    if facts is not None:
        facts_text = _facts_text(facts)
    digests = digests_text(obj, size)
    return Row(path, size, when, checksum, algo, facts_text, digests=digests)


def digests_text(obj: dict, size: int, dumps=None) -> str | None:
    """The stored text of a file line's other checksums (``checksums``, ``checksummed_at``); ValueError when bad."""
    checksums, at = obj.get("checksums"), obj.get("checksummed_at")
    if checksums is None and at is None:
        return None
    stored = from_line(checksums, at, size)
    return (dumps or digests_dumps)(stored) if stored else None


def _facts_text(facts: object) -> str:
    """The canonical JSON text of a line's facts, as stored; raises ValueError when they are not facts."""
    return _facts_stored(facts)[0]


def _facts_stored(facts: object, dumps=None) -> tuple[str, dict]:
    """The canonical JSON text of a line's facts and the facts it stands for (what recognition sees).

    ``dumps`` writes the text instead of ``json.dumps`` (keys sorted, no spaces) where only the JSON counts.
    """
    if not isinstance(facts, dict) or not isinstance(facts.get("kind"), str):
        raise ValueError('facts must be an object with a "kind"')
    text = dumps(facts) if dumps is not None else json.dumps(facts, sort_keys=True, separators=(",", ":"))
    if "\\u0000" in text:
        # PostgreSQL's jsonb cannot hold NUL; such a manifest is unreadable to us, not fatal.
        facts = {"kind": str(facts["kind"])[:40], "error": "facts contain a NUL character"}
        text = json.dumps(facts)
    return text, facts


def read_inventory(stream, *, max_line: int, header: dict | None = None) -> Iterator[Row]:
    """Yield every file row of a gzip NDJSON inventory, raising InventoryError at the first problem.

    The header was checked when the upload was received; the trailer must be present (else the
    upload was truncated) and its counts must match.
    """
    gz = gzip.GzipFile(fileobj=stream, mode="rb")
    lineno = 0
    files = 0
    total = 0
    seen_end = False
    try:
        while True:
            raw = gz.readline(max_line + 1)
            if not raw:
                break
            lineno += 1
            if len(raw) > max_line:
                raise InventoryError(lineno, f"line is longer than {max_line} bytes")
            if not raw.endswith(b"\n"):
                raise InventoryError(lineno, "the last line is cut off (truncated upload?)")
            if seen_end:
                raise InventoryError(lineno, "content after the end line")
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                raise InventoryError(lineno, "not valid JSON") from None
            if not isinstance(obj, dict):
                raise InventoryError(lineno, "a line must be a JSON object")
            kind = obj.get("type")
            if lineno == 1:
                if kind != "header":
                    raise InventoryError(1, "the first line must be the header")
                if header is not None:
                    header.update(obj)
                continue
            if kind == "file":
                try:
                    row = _parse_file_line(obj)
                except ValueError as exc:
                    raise InventoryError(lineno, str(exc)) from None
                files += 1
                total += row.size
                yield row
            elif kind == "end":
                if obj.get("files") != files or obj.get("bytes") != total:
                    raise InventoryError(
                        lineno,
                        f"the end line counts {obj.get('files')} files / {obj.get('bytes')} bytes "
                        f"but the inventory has {files} / {total}",
                    )
                seen_end = True
            elif kind == "header":
                raise InventoryError(lineno, "a second header")
            else:
                raise InventoryError(lineno, f"unknown line type {kind!r}")
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise InventoryError(lineno + 1, f"the gzip stream is damaged or truncated ({exc})") from None
    if lineno == 0:
        raise InventoryError(None, "the inventory is empty")
    if not seen_end:
        raise InventoryError(lineno, 'no end line: the upload is truncated (expected {"type": "end", ...})')


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


@dataclass
class MergeCounts:
    added: int
    changed: int
    gone: int


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


SHARD_COLUMNS = (*STAGED_COLUMNS, "first_seen_at", "changed_at", "changed_by_id", "copy_id")


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
    from catalog.formats.base import FileEntry
    from catalog.layout import sqlite_epoch
    from catalog.services import GroupFile

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


def flush_every() -> int:
    """Files judged between two writes of links and verification: bounds the worker's memory."""
    return settings.INGEST_CHUNK_ROWS * 4


def ingest(inventory_id: int, *, claim: str = "") -> Inventory | None:
    """Apply one received inventory, all or nothing (``_ingest``), with the cyclic garbage collector paused:
    a million files make millions of objects that form no cycle (``ckptfleet.heap.collector_paused``)."""
    from ckptfleet.heap import collector_paused

    with collector_paused():
        return _ingest(inventory_id, claim=claim)


def _ingest(inventory_id: int, *, claim: str = "") -> Inventory | None:
    """Apply one received inventory, all or nothing. Safe to run twice: only one run claims it.

    ``claim`` is the task id: a redelivery of the same task (its worker died mid-way) may take the
    inventory over again, a different task may not. The first inventory of a location that has no
    shard files yet is applied in one pass (``_ingest_direct``) when it is sorted by path as the agent
    sends it and every line is as it should be; any other is staged, then merged (``apply_staged``).
    """
    waiting = Q(status=InventoryStatus.RECEIVED)
    if claim:
        waiting |= Q(status=InventoryStatus.PROCESSING, claimed_by=claim)
    # Scans have no upload: they are applied by ingest.scan.scan_run, never here.
    claimed = Inventory.objects.filter(waiting, pk=inventory_id, source=InventorySource.AGENT).update(
        status=InventoryStatus.PROCESSING, started_at=timezone.now(), claimed_by=claim
    )
    if claimed != 1:
        log.info("inventory %s is not waiting to be ingested; nothing to do", inventory_id)
        return None
    inventory = Inventory.objects.select_related("location").get(pk=inventory_id)
    location = inventory.location
    unstage(inventory.pk)  # a worker killed mid-staging may have left rows behind
    t0 = time.monotonic()
    header: dict = {}
    try:
        if not ShardFile.objects.filter(location=location).exists():
            done = _ingest_direct(inventory, started=t0)
            if done is not None:
                return done
            t0 = time.monotonic()  # not taken in one pass: staged below, timed from here
        with inventory.upload.open("rb") as stream:
            files, total = stage(inventory, stream, header)
        if files == 0 and not header.get("allow_empty"):
            present = ShardFile.objects.filter(location=location, gone_at__isnull=True).count()
            if present:
                raise InventoryError(
                    None,
                    f"the root reported no files, but {present} were present: is its file system mounted? "
                    "If it is really empty now, run the agent with --allow-empty",
                )
    except InventoryError as exc:
        unstage(inventory.pk)
        return fail(inventory, exc.reason, exc.line)
    except OSError as exc:
        unstage(inventory.pk)
        return fail(inventory, f"the stored upload cannot be read: {exc}", None)
    except DatabaseError as exc:
        unstage(inventory.pk)
        return fail(inventory, f"the database refused a value: {str(exc).splitlines()[0]}", None)

    return apply_staged(inventory, files=files, total=total, started=t0)


def _finish(
    inventory: Inventory, location: StorageLocation, *, now: datetime, files: int, total: int, counts, totals=None
) -> None:
    """The end of every apply, in its transaction: the usage rollup, the location's cursor, the inventory.

    ``totals`` ({copy id or None: (bytes, files)}) are given by an apply that wrote every present file itself.
    """
    from spend.usage import usage_refresh

    found = CheckpointCopy.objects.filter(location=location, gone_at__isnull=True).count()
    usage_refresh(location=location, day=now.astimezone(UTC).date(), now=now, totals=totals)
    taken = inventory.taken_at or now
    StorageLocation.objects.filter(pk=location.pk).update(last_inventory=inventory, last_applied_at=taken)
    Inventory.objects.filter(pk=inventory.pk).update(
        status=InventoryStatus.APPLIED,
        finished_at=timezone.now(),
        files_count=files,
        bytes_total=total,
        files_added=counts.added,
        files_changed=counts.changed,
        files_gone=counts.gone,
        checkpoints_found=found,
    )


def log_applied(inventory, mode, files, counts, judged, t0, t1, t2, t3) -> None:
    log.info(
        "inventory %s applied (%s): staged %s rows in %.2f s, merged (+%s ~%s -%s) in %.2f s, "
        "judged %s checkpoint copies in %.2f s, committed in %.2f s",
        inventory.pk,
        mode,
        files,
        t1 - t0,
        counts.added,
        counts.changed,
        counts.gone,
        t2 - t1,
        judged,
        t3 - t2,
        time.monotonic() - t3,
    )


def end_apply(inventory: Inventory, location: StorageLocation, links, judge, *, now, files, total, counts) -> None:
    """The end of an apply that writes its new files a batch at a time (``links``, with ``flush``, ``close``
    and ``added``): the last batch and its verification, then ``_finish``."""
    links.flush()
    judge.verify()
    links.close()
    counts.added = links.added
    _finish(inventory, location, now=now, files=files, total=total, counts=counts)


def apply_staged(inventory: Inventory, *, files: int, total: int, started: float) -> Inventory:
    """Merge a fully staged snapshot, judge what it touched, and mark the inventory applied, in one transaction.

    Changed and gone rows are updated first; then every run directory with a new, changed or gone
    file is judged from the staged rows, and its new files are inserted already linked to their copy.
    """
    from catalog.services import Judge

    location = inventory.location
    try:
        with transaction.atomic():
            # One inventory of a location is merged at a time; a newer snapshot waits for an older one.
            location = StorageLocation.objects.select_for_update().get(pk=location.pk)
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
                _write_links(links, group_files, judge.group(group, [f.entry for f in group_files]))
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


class _Fallback(Exception):
    """The one-pass path does not take this upload as it is; the line-by-line one decides (and names any error)."""


class _Lines:
    """The decompressed upload as blocks of whole lines, the header and the end line kept back and read here.

    Anything odd about the stream itself (a damaged gzip stream, a NUL byte, a line over the limit, a first
    line that is not a header, a cut-off or missing end line) raises ``_Fallback``: the line-by-line reader
    then says what is wrong and where.
    """

    BLOCK = 1 << 20

    def __init__(self, stream, max_line: int) -> None:
        self.stream = stream
        self.max_line = max_line
        self.header: dict | None = None
        self.end: dict | None = None

    def _line(self, raw: bytes, kind: str) -> dict:
        if len(raw) > self.max_line:
            raise _Fallback
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise _Fallback from None
        if not isinstance(obj, dict) or obj.get("type") != kind:
            raise _Fallback
        return obj

    def blocks(self) -> Iterator[bytes]:
        """Blocks of the lines between the header and the end line, each ending with a newline."""
        gz = gzip.GzipFile(fileobj=self.stream, mode="rb")
        pending = b""
        try:
            while data := gz.read(self.BLOCK):
                pending += data
                if self.header is None:
                    k = pending.find(b"\n")
                    if k < 0:
                        if len(pending) > self.max_line:
                            raise _Fallback
                        continue
                    self.header = self._line(pending[: k + 1], "header")
                    pending = pending[k + 1 :]
                # Keep back the last whole line (it may be the end line) and any part of the next.
                last = pending.rfind(b"\n")
                cut = pending.rfind(b"\n", 0, last) if last > 0 else -1
                if cut < 0:
                    if len(pending) > 2 * self.max_line + self.BLOCK:
                        raise _Fallback
                    continue
                block, pending = pending[: cut + 1], pending[cut + 1 :]
                if b"\x00" in block:
                    raise _Fallback
                yield block
        except (EOFError, zlib.error, OSError):  # gzip.BadGzipFile is an OSError
            raise _Fallback from None
        if self.header is None or not pending.endswith(b"\n") or pending.count(b"\n") != 1:
            raise _Fallback
        self.end = self._line(pending, "end")


# Seconds since the epoch that Python's datetime.fromtimestamp surely takes (years 1 and 9999, less two days).
_MTIME_MIN, _MTIME_MAX = -62135596800 + 172800, 253402300799 - 172800
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _second_text(whole: int) -> str:
    """A whole second since the epoch as COPY reads a timestamp, in UTC, to the second."""
    day, second = divmod(whole, 86400)
    d = _EPOCH + timedelta(days=day)
    return f"{d.year:04}-{d.month:02}-{d.day:02} {second // 3600:02}:{second // 60 % 60:02}:{second % 60:02}"


def _orjson_facts(facts: dict) -> str:
    return orjson.dumps(facts, option=orjson.OPT_SORT_KEYS).decode()


# What check_path refuses: a control character or backslash; a '.' or '..' component.
_BAD_CHAR = re.compile(r"[\x00-\x1f\x7f\\]")
_DOT_PART = re.compile(r"(?:^|/)\.\.?(?:/|$)")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class _Reader:
    """The run directories of a path-sorted upload, each handed out once all its files have passed.

    Every line is checked by the rules of ``_parse_file_line``; a line that breaks one, is in doubt, or comes
    out of path order raises ``_Fallback``, and the line-by-line path then applies the upload or names the line
    and the reason. Lines with facts (manifests only) are parsed with ``json`` exactly as that path parses them,
    the others with orjson, which reads the same values from every line it accepts.

    Every file of a group lies in the range [group + "/", group + "0") (the group of a file is its run
    directory or, above that depth, its directory), so in path order a group is complete once a path outside
    its range arrives. Groups nest (a team directory's own files and its runs), so a few are open at once.
    A group comes as (group, entries, extras): the ``FileEntry`` of each file, as recognition sees it, and
    beside it (the mtime as COPY text, canonical facts text or None), as the row is written.

    ``pg``: the facts go to a jsonb column, so orjson may write their text (the same JSON, not the same
    characters as ``json.dumps``: SQLite keeps the text as written and compares it).
    """

    def __init__(self, lines: _Lines, template, max_line: int, *, pg: bool) -> None:
        self.lines = lines
        self.template = template
        self.max_line = max_line
        self.dumps = _orjson_facts if pg else None
        self.files = 0
        self.total = 0

    def groups(self) -> Iterator[tuple[str, list, list]]:
        from catalog.formats.base import FileEntry

        loads, sha256, modf, dumps = orjson.loads, _SHA256.fullmatch, math.modf, self.dumps
        bad_char, dot_part, group_of = _BAD_CHAR.search, _DOT_PART.search, self.template.group_of
        seconds: dict[int, str] = {}
        depth, max_line = self.template.depth, self.max_line
        previous = ""
        open_groups: dict[str, tuple[list, list]] = {}
        last = prefix = None  # prefix: the current run directory + "/": every path below it is in it
        entries: list = []
        extras: list = []
        files = total = 0
        for block in self.lines.blocks():
            for raw in block[:-1].split(b"\n"):
                if len(raw) > max_line:
                    raise _Fallback
                try:
                    obj = json.loads(raw) if b'"facts"' in raw else loads(raw)
                    if obj["type"] != "file":
                        raise _Fallback
                    path, size, mtime = obj["path"], obj["size"], obj["mtime"]
                except (ValueError, UnicodeDecodeError, KeyError, TypeError):
                    raise _Fallback from None
                if (
                    type(path) is not str
                    or path <= previous  # out of order, reported twice or empty
                    or bad_char(path)
                    or path[0] == "/"
                    or path[-1] == "/"
                    or "//" in path
                    or (("/." in path or path[0] == ".") and dot_part(path))
                    or type(size) is not int
                    or not 0 <= size < 2**63
                    or (type(mtime) is not float and type(mtime) is not int)
                ):
                    raise _Fallback
                if not path.isascii():
                    try:
                        if len(path.encode("utf-8")) > MAX_PATH_BYTES:
                            raise _Fallback
                    except UnicodeEncodeError:
                        raise _Fallback from None
                elif len(path) > MAX_PATH_BYTES:
                    raise _Fallback
                # The mtime as whole seconds and microseconds; then its text for COPY, the seconds' part kept.
                whole, us = (mtime, 0) if type(mtime) is int else _microseconds(mtime, modf)
                text = seconds.get(whole)  # the files of one save share a few seconds
                if text is None:
                    if not _MTIME_MIN < whole < _MTIME_MAX:
                        raise _Fallback
                    if len(seconds) >= 4096:
                        seconds.clear()
                    text = seconds[whole] = _second_text(whole)
                stamp = f"{text}.{us:06}+00"
                sha = obj.get("sha256")
                if sha is not None and (type(sha) is not str or not sha256(sha)):
                    raise _Fallback
                facts = obj.get("facts")
                facts_text = None
                if facts is not None:
                    try:
                        facts_text, facts = _facts_stored(facts, dumps)
                    except (ValueError, TypeError):  # not facts, or a value orjson does not write
                        raise _Fallback from None
                digests = None
                if "checksums" in obj or "checksummed_at" in obj:
                    try:
                        digests = digests_text(obj, size)
                    except (ValueError, TypeError):
                        raise _Fallback from None
                previous = path
                files += 1
                total += size
                mtime = (whole * 1_000_000 + us) / 1_000_000  # as datetime.timestamp() gives it
                entry = FileEntry(path, size, mtime, facts, sha, "sha256" if sha else None, digests)
                if prefix is None or not path.startswith(prefix):
                    group = group_of(path)
                    if group != last:
                        for g in list(open_groups):
                            if g and g != group and not path.startswith(g + "/"):
                                yield (g, *open_groups.pop(g))
                        last = group
                    entries, extras = open_groups.setdefault(group, ([], []))
                    # A run directory holds everything below it; a shallower group only its own files.
                    prefix = group + "/" if group and group.count("/") + 1 >= depth else None
                entries.append(entry)
                extras.append((stamp, facts_text))  # the digests text rides on the entry
        self.files, self.total = files, total
        for g, (group_entries, group_extras) in sorted(open_groups.items(), key=lambda item: item[0], reverse=True):
            yield g, group_entries, group_extras
        open_groups.clear()


def _microseconds(mtime: float, modf=math.modf) -> tuple[int, int]:
    """``mtime`` to the microsecond exactly as ``datetime.fromtimestamp`` rounds it (half to even), as whole seconds
    and microseconds; ``_Fallback`` for NaN or infinity (which json reads)."""
    try:
        frac, whole = modf(mtime)
        us, seconds = round(frac * 1e6), int(whole)
    except (ValueError, OverflowError):
        raise _Fallback from None
    if us >= 1_000_000:
        return seconds + 1, us - 1_000_000
    if us < 0:
        return seconds - 1, us + 1_000_000
    return seconds, us


class _Writer:
    """Writes judged rows into ``catalog_shardfile``, already linked to their copies.

    On PostgreSQL the rows of a batch go as one ``COPY`` in text format from a second thread, so that
    PostgreSQL writes them (heap, indexes, the reference trigger) on its own core while this one parses and
    recognises the next batch; ``wait`` returns once it is written. On SQLite, batched INSERTs.
    """

    def __init__(self, location: StorageLocation, inventory: Inventory, now: datetime) -> None:
        self.pg = connection.vendor == "postgresql"
        self.table = ShardFile._meta.db_table
        self.columns = ", ".join(("location_id", *SHARD_COLUMNS))
        self.loc, self.inv, self.now = location.pk, inventory.pk, now
        # The columns after facts: no storage class, tier, ETag or version; no hold; then the digests;
        # then seen and changed now.
        self.middle = "\t\t\t\t\t\\N\t\\N\t"
        self.tail = f"\t{now}\t{now}\t{inventory.pk}\t"
        self.pool = ThreadPoolExecutor(max_workers=1) if self.pg else None
        self.raw = connection.connection
        self.pending: concurrent.futures.Future | None = None

    def text(self, entries: list, extras: list, links: list[int | None]) -> str:
        """The COPY text of one run directory's rows: paths hold no tab, newline or backslash (check_path)."""
        loc, middle, tail, null = self.loc, self.middle, self.tail, "\\N"
        out = []
        for entry, (stamp, facts_text), copy_id in zip(entries, extras, links, strict=True):
            facts = facts_text.replace("\\", "\\\\") if facts_text is not None else null
            sha = entry.checksum or ""
            algo = "sha256" if sha else ""
            link = null if copy_id is None else copy_id
            digests = entry.digests or null  # JSON of hex, base64 and numbers: no tab, newline or backslash
            out.append(
                f"{loc}\t{entry.path}\t{entry.size}\t{stamp}\t{sha}\t{algo}\t{facts}{middle}{digests}{tail}{link}\n"
            )
        return "".join(out)

    def _copy(self, data: bytes) -> None:
        # Django's connection is per thread: this thread uses the caller's psycopg connection, which nothing
        # else touches until ``wait`` returns.
        with self.raw.cursor() as cursor, cursor.copy(f"COPY {self.table} ({self.columns}) FROM STDIN") as copy:
            copy.write(data)

    def send(self, batch: list[tuple[list, list, list[int | None]]]) -> None:
        """Write one batch of run directories' files (entries, extras, copy ids)."""
        self.wait()
        if self.pg:
            data = "".join([self.text(*judged) for judged in batch]).encode("utf-8")
            self.pending = self.pool.submit(self._copy, data)
            return
        adapt = connection.ops.adapt_datetimefield_value
        when = adapt(self.now)
        marks = ", ".join(["%s"] * (len(SHARD_COLUMNS) + 1))
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {self.table} ({self.columns}) VALUES ({marks})",
                [
                    (self.loc, e.path, e.size, adapt(datetime.fromisoformat(stamp)), e.checksum or "",
                     e.checksum_algo or "", facts_text, "", "", "", "", None, None, e.digests, when, when, self.inv,
                     copy_id)
                    for entries, extras, links in batch
                    for e, (stamp, facts_text), copy_id in zip(entries, extras, links, strict=True)
                ],
            )  # fmt: skip

    def wait(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()

    def close(self) -> None:
        """Never leave the connection in the middle of a COPY, whatever happened."""
        if self.pending is not None:
            concurrent.futures.wait([self.pending])
        if self.pool is not None:
            self.pool.shutdown()


def _ingest_direct(inventory: Inventory, *, started: float) -> Inventory | None:
    """Apply the first inventory of a location in one pass: parse the path-sorted upload, recognise each run
    directory as soon as its last file has passed, judge it, and write its rows straight into
    ``catalog_shardfile`` linked to their copies, every row once. One transaction, so nothing is applied
    unless all of it is.

    Batches of run directories alternate: while PostgreSQL writes one batch (``_Writer``), the next is parsed
    and recognised here; the copies of a batch are written and the previous batch verified in between.

    Returns None, having changed nothing, when the upload is not one this path takes as it is (not sorted
    by path, anything invalid or in doubt) or the location got files meanwhile: the caller then stages it,
    and the line-by-line reader applies it or names the line and the reason.
    """
    from catalog.recognition import recognize
    from catalog.services import Judge

    files = total = 0
    try:
        with inventory.upload.open("rb") as stream, transaction.atomic():
            location = StorageLocation.objects.select_for_update().get(pk=inventory.location_id)
            if ShardFile.objects.filter(location=location).exists():
                return None
            now = timezone.now()
            judge = Judge(location, now=now)
            lines = _Lines(stream, settings.INVENTORY_MAX_LINE)
            reader = _Reader(lines, judge.template, settings.INVENTORY_MAX_LINE, pg=connection.vendor == "postgresql")
            writer = _Writer(location, inventory, now)
            flush_at = flush_every()
            batch: list[tuple] = []
            batch_files = 0
            totals: dict[int | None, list[int]] = {}  # copy id (None: no copy) -> [bytes, files]

            def flush() -> None:
                writer.wait()  # the previous batch is written: its checkpoints can be verified
                judge.verify()
                judged = []
                # The batch's runs, checkpoints and new copies are written in a few statements for all of them.
                every = judge.groups([(group, entries, found) for group, entries, _, found in batch])
                for (_, entries, extras, _), targets in zip(batch, every, strict=True):
                    links = [targets.get(e.path) for e in entries]
                    for entry, copy_id in zip(entries, links, strict=True):
                        sums = totals.get(copy_id)
                        if sums is None:
                            sums = totals[copy_id] = [0, 0]
                        sums[0] += entry.size
                        sums[1] += 1
                    judged.append((entries, extras, links))
                writer.send(judged)
                batch.clear()

            try:
                for group, entries, extras in reader.groups():
                    # Recognition is pure Python: it runs while PostgreSQL writes the previous batch.
                    batch.append((group, entries, extras, recognize(entries)))
                    batch_files += len(entries)
                    if batch_files >= flush_at:
                        flush()
                        batch_files = 0
                files, total = reader.files, reader.total
                if lines.end.get("files") != files or lines.end.get("bytes") != total:
                    raise _Fallback
                flush()
                writer.wait()
            finally:
                writer.close()
            t1 = time.monotonic()
            judge.verify()
            counts = MergeCounts(added=files, changed=0, gone=0)
            t2 = time.monotonic()
            _finish(inventory, location, now=now, files=files, total=total, counts=counts, totals=totals)
            t3 = time.monotonic()
    except _Fallback:
        log.info("inventory %s: the one-pass ingest leaves it to the line-by-line one", inventory.pk)
        return None
    except (DatabaseError, connection.Database.Error) as exc:
        log.info("inventory %s: the one-pass ingest leaves it to the line-by-line one (%s)", inventory.pk, exc)
        return None
    log_applied(inventory, "direct", files, counts, judge.found, started, t1, t2, t3)
    inventory.refresh_from_db()
    return inventory


def fail(inventory: Inventory, reason: str, line: int | None) -> Inventory:
    Inventory.objects.filter(pk=inventory.pk).update(
        status=InventoryStatus.FAILED, finished_at=timezone.now(), error=reason[:2000], error_line=line
    )
    StorageLocation.objects.filter(pk=inventory.location_id).update(last_inventory=inventory)
    inventory.refresh_from_db()
    log.warning("inventory %s of %s failed: %s", inventory.pk, inventory.location, reason)
    return inventory


RESEND_AFTER = timedelta(minutes=10)
STALE_AFTER = timedelta(hours=2)
# A listing of tens of millions of objects can take hours; a scan is abandoned much later.
STALE_SCAN_AFTER = timedelta(hours=24)
KEEP_APPLIED_UPLOADS = timedelta(days=1)
KEEP_FAILED_UPLOADS = timedelta(days=30)


@dataclass
class SweepCounts:
    resent: int = 0
    abandoned: int = 0
    uploads_removed: int = 0


def sweep(*, now: datetime | None = None) -> SweepCounts:
    """Periodic care of the inventory queue, so that no upload waits or lingers forever.

    - received but never picked up (the broker lost the message): queued again;
    - claimed but not finished long after (the worker died and its message is gone): failed, with why;
    - stored uploads removed once applied (a day later) or failed (a month later, for diagnosis).
    """

    now = now or timezone.now()
    counts = SweepCounts()
    waiting = Inventory.objects.filter(status=InventoryStatus.RECEIVED, received_at__lt=now - RESEND_AFTER)
    for pk, source in waiting.values_list("pk", "source")[:1000]:
        task("ingest.tasks.ingest_inventory" if source == InventorySource.AGENT else "ingest.tasks.scan_bucket").delay(
            pk
        )
        counts.resent += 1
    processing = Inventory.objects.filter(status=InventoryStatus.PROCESSING)
    stale = list(
        processing.filter(
            Q(source=InventorySource.AGENT, started_at__lt=now - STALE_AFTER)
            | (~Q(source=InventorySource.AGENT) & Q(started_at__lt=now - STALE_SCAN_AFTER))
        ).values_list("pk", flat=True)[:1000]
    )
    for pk in stale:
        unstage(pk)
        counts.abandoned += Inventory.objects.filter(pk=pk, status=InventoryStatus.PROCESSING).update(
            status=InventoryStatus.FAILED,
            finished_at=now,
            error="abandoned: not finished long after it started (the worker stopped); "
            "the next inventory or scan of the location replaces it",
        )
    old = Inventory.objects.exclude(upload="").filter(
        Q(status=InventoryStatus.APPLIED, finished_at__lt=now - KEEP_APPLIED_UPLOADS)
        | Q(status=InventoryStatus.FAILED, finished_at__lt=now - KEEP_FAILED_UPLOADS)
    )
    for inventory in old[:1000]:
        inventory.upload.delete(save=False)
        Inventory.objects.filter(pk=inventory.pk).update(upload="")
        counts.uploads_removed += 1
    return counts
