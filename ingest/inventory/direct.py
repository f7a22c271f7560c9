"""The one-pass ("direct") ingest of a location's first inventory, sorted by path as the agent sends it:
read once, each run directory judged as soon as its last file has passed, and its rows written straight into
``catalog_shardfile`` with their copies (COPY on PostgreSQL, from a second thread), in one transaction."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from catalog.models import ShardFile
from catalog.recognition import recognize
from catalog.services import Judge
from fleet.models import Inventory, StorageLocation
from ingest.inventory.apply import MergeCounts, finish, flush_every, log_applied
from ingest.inventory.direct_reader import Fallback, Lines, Reader
from ingest.inventory.rows import SHARD_COLUMNS

# Table and column names in these statements come from model metadata and constants, never from input;
# values are parameters (hence the S608 noqa).

log = logging.getLogger(__name__)


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


def ingest_direct(inventory: Inventory, *, started: float) -> Inventory | None:
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

    files = total = 0
    try:
        with inventory.upload.open("rb") as stream, transaction.atomic():
            location = StorageLocation.objects.locked().get(pk=inventory.location_id)
            if ShardFile.objects.filter(location=location).exists():
                return None
            now = timezone.now()
            judge = Judge(location, now=now)
            lines = Lines(stream, settings.INVENTORY_MAX_LINE)
            reader = Reader(lines, judge.template, settings.INVENTORY_MAX_LINE, pg=connection.vendor == "postgresql")
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
                    raise Fallback
                flush()
                writer.wait()
            finally:
                writer.close()
            t1 = time.monotonic()
            judge.verify()
            counts = MergeCounts(added=files, changed=0, gone=0)
            t2 = time.monotonic()
            finish(inventory, location, now=now, files=files, total=total, counts=counts, totals=totals)
            t3 = time.monotonic()
    except Fallback:
        log.info("inventory %s: the one-pass ingest leaves it to the line-by-line one", inventory.pk)
        return None
    except (DatabaseError, connection.Database.Error) as exc:
        log.info("inventory %s: the one-pass ingest leaves it to the line-by-line one (%s)", inventory.pk, exc)
        return None
    log_applied(inventory, "direct", files, counts, judge.found, started, t1, t2, t3)
    inventory.refresh_from_db()
    return inventory
