"""Applying an inventory: validate every line, stage it in bulk, then merge it in set-based SQL.

The flow keeps the promise that bad input changes nothing: the whole upload is parsed and staged
before anything touches the catalog, and the merge of staged rows into ``catalog_shardfile`` is
three statements in one transaction (update changed, insert new, mark gone). Staging uses COPY on
PostgreSQL and batched INSERTs on SQLite, in chunks of ``INGEST_CHUNK_ROWS``; memory is bounded by
one chunk, whatever the size of the inventory.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from catalog.models import CheckpointCopy, IngestRow, ShardFile
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
        if not isinstance(facts, dict) or not isinstance(facts.get("kind"), str):
            raise ValueError('facts must be an object with a "kind"')
        facts_text = json.dumps(facts, sort_keys=True, separators=(",", ":"))
        if "\\u0000" in facts_text:
            # PostgreSQL's jsonb cannot hold NUL; such a manifest is unreadable to us, not fatal.
            facts_text = json.dumps({"kind": str(facts["kind"])[:40], "error": "facts contain a NUL character"})
    return Row(path, size, when, checksum, algo, facts_text)


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


def _stage_chunk(inventory_id: int, chunk: list[Row]) -> None:
    table = IngestRow._meta.db_table
    cols = ", ".join(("inventory_id", *STAGED_COLUMNS))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({cols}) FROM STDIN") as copy:
                for r in chunk:
                    copy.write_row(r.values(inventory_id, _same))
        else:
            adapt = connection.ops.adapt_datetimefield_value
            marks = ", ".join(["%s"] * (len(STAGED_COLUMNS) + 1))
            cursor.executemany(
                f"INSERT INTO {table} ({cols}) VALUES ({marks})", [r.values(inventory_id, adapt) for r in chunk]
            )


def _same(value):
    return value


def stage(inventory: Inventory, stream, header: dict | None = None) -> tuple[int, int]:
    """Parse and stage every row of an uploaded inventory. Raises InventoryError; nothing is applied then."""
    return stage_rows(inventory, read_inventory(stream, max_line=settings.INVENTORY_MAX_LINE, header=header))


def stage_rows(inventory: Inventory, rows: Iterable[Row], *, progress=None) -> tuple[int, int]:
    """Stage rows in chunks (COPY on PostgreSQL). ``progress(files, bytes)`` is called after each chunk."""
    files = 0
    total = 0
    for chunk in _chunks(iter(rows), settings.INGEST_CHUNK_ROWS):
        try:
            with transaction.atomic():
                _stage_chunk(inventory.pk, chunk)
        except (IntegrityError, connection.Database.IntegrityError):
            # COPY raises the driver's own error, not Django's wrapper.
            paths = [r.path for r in chunk]
            dupe = _first_duplicate(inventory.pk, paths)
            raise InventoryError(None, f"the path {dupe!r} is reported more than once") from None
        files += len(chunk)
        total += sum(r.size for r in chunk)
        if progress is not None:
            progress(files, total)
    return files, total


def _first_duplicate(inventory_id: int, paths: list[str]) -> str:
    seen: set[str] = set()
    for p in paths:
        if p in seen:
            return p
        seen.add(p)
    staged = set(
        IngestRow.objects.filter(inventory_id=inventory_id, path__in=paths[:5000]).values_list("path", flat=True)
    )
    return next((p for p in paths if p in staged), paths[0])


def unstage(inventory_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {IngestRow._meta.db_table} WHERE inventory_id = %s", [inventory_id])


@dataclass
class MergeCounts:
    added: int
    changed: int
    gone: int


def merge(inventory: Inventory, location: StorageLocation, *, now: datetime) -> MergeCounts:
    """Merge the staged snapshot into the location's shard files. Runs inside the caller's transaction.

    Only rows whose facts differ are written, so the same inventory applied twice writes nothing.
    """
    files = "catalog_shardfile"
    staged = IngestRow._meta.db_table
    inv, loc = inventory.pk, location.pk
    columns = ", ".join(STAGED_COLUMNS)
    staged_columns = ", ".join(f"s.{c}" for c in STAGED_COLUMNS)
    adapt = connection.ops.adapt_datetimefield_value
    previous_seen = adapt(location.last_applied_at or now)
    now = adapt(now)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {files} SET size = s.size, mtime = s.mtime, checksum = s.checksum,
                   checksum_algo = s.checksum_algo, facts = s.facts, storage_class = s.storage_class,
                   tier = s.tier, etag = s.etag, version_id = s.version_id, legal_hold = s.legal_hold,
                   retain_until = s.retain_until, changed_at = %s,
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
                   OR {files}.retain_until <> s.retain_until)
            """,
            [now, inv, inv, loc],
        )
        changed = cursor.rowcount
        cursor.execute(
            f"""
            INSERT INTO {files} (location_id, {columns}, first_seen_at, changed_at, changed_by_id)
            SELECT %s, {staged_columns}, %s, %s, %s
            FROM {staged} s
            WHERE s.inventory_id = %s
              AND NOT EXISTS (SELECT 1 FROM {files} f WHERE f.location_id = %s AND f.path = s.path)
            """,
            [loc, now, now, inv, inv, loc],
        )
        added = cursor.rowcount
        cursor.execute(
            f"""
            UPDATE {files} SET gone_at = %s, last_seen_at = %s, changed_at = %s, changed_by_id = %s
            WHERE location_id = %s AND gone_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM {staged} s WHERE s.inventory_id = %s AND s.path = {files}.path)
            """,
            [now, previous_seen, now, inv, loc, inv],
        )
        gone = cursor.rowcount
    return MergeCounts(added=added, changed=changed, gone=gone)


def ingest(inventory_id: int, *, claim: str = "") -> Inventory | None:
    """Apply one received inventory, all or nothing. Safe to run twice: only one run claims it.

    ``claim`` is the task id: a redelivery of the same task (its worker died mid-way) may take the
    inventory over again, a different task may not.
    """
    waiting = Q(status=InventoryStatus.RECEIVED)
    if claim:
        waiting |= Q(status=InventoryStatus.PROCESSING, claimed_by=claim)
    # Scans have no upload: they are applied by fleet.scan.scan_run, never here.
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


def apply_staged(inventory: Inventory, *, files: int, total: int, started: float) -> Inventory:
    """Merge a fully staged snapshot, judge what it touched, and mark the inventory applied, in one transaction."""
    from catalog.services import location_recognize
    from catalog.usage import usage_refresh

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
            t2 = time.monotonic()
            judged = location_recognize(location=location, inventory=inventory)
            found = CheckpointCopy.objects.filter(location=location, gone_at__isnull=True).count()
            usage_refresh(location=location, day=now.astimezone(UTC).date(), now=now)
            t3 = time.monotonic()
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
    finally:
        unstage(inventory.pk)
    log.info(
        "inventory %s applied: staged %s rows in %.2f s, merged (+%s ~%s -%s) in %.2f s, "
        "judged %s checkpoint copies in %.2f s, committed in %.2f s",
        inventory.pk,
        files,
        t1 - started,
        counts.added,
        counts.changed,
        counts.gone,
        t2 - t1,
        judged,
        t3 - t2,
        time.monotonic() - t3,
    )
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
    from fleet.tasks import ingest_inventory, scan_bucket

    now = now or timezone.now()
    counts = SweepCounts()
    waiting = Inventory.objects.filter(status=InventoryStatus.RECEIVED, received_at__lt=now - RESEND_AFTER)
    for pk, source in waiting.values_list("pk", "source")[:1000]:
        (ingest_inventory if source == InventorySource.AGENT else scan_bucket).delay(pk)
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
