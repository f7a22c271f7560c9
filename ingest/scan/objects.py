"""What each listed object becomes: a staged ``Row``, with what the last scans learnt of it when it is
unchanged, and the facts read by ranged GETs (several pages in flight while the listing goes on)."""

from __future__ import annotations

import collections
import itertools
import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import TextField
from django.db.models.functions import Cast

from catalog.digests import dumps as digests_dumps
from catalog.digests import loads as digests_loads
from catalog.models import ShardFile
from fleet import s3
from fleet.agent import facts_kind
from fleet.models import Bucket
from ingest.inventory.lines import check_path
from ingest.inventory.rows import Row
from ingest.scan.fetch import Fetcher
from ingest.scan.notes import Notes

FETCH_THREADS = 8
PAGES_IN_FLIGHT = 4  # listing pages whose ranged GETs may be under way at once
PREVIOUS_BATCH = 500


@dataclass(slots=True)
class _Previous:
    etag: str
    size: int
    mtime: datetime
    facts: Any
    checksum: str
    checksum_algo: str
    version_id: str
    legal_hold: bool | None
    retain_until: datetime | None
    digests: str | None  # the stored text, staged again as it is: not decoded for every unchanged object


@dataclass(slots=True)
class _Job:
    path: str
    obj: s3.ObjectInfo
    previous: _Previous | None  # only when the object is unchanged since then
    fetch_facts: bool
    head: bool  # in the listing's path: only in an Object Lock bucket, whose lock state belongs in the snapshot


def _facts_text(facts: dict | None) -> str | None:
    """Facts as the canonical JSON text the ingest stages (the same rules as an agent's file line)."""
    if facts is None:
        return None
    text = json.dumps(facts, sort_keys=True, separators=(",", ":"))
    if "\\u0000" in text:
        # PostgreSQL's jsonb cannot hold NUL; such a manifest is unreadable to us, not fatal.
        return json.dumps({"kind": str(facts.get("kind"))[:40], "error": "facts contain a NUL character"})
    if len(text) > settings.INVENTORY_MAX_LINE:
        return json.dumps(
            {"kind": str(facts.get("kind"))[:40], "error": f"facts of {len(text)} bytes exceed the line limit"}
        )
    return text


def same_digests(a: dict | None, b: dict | None) -> bool:
    """The same checksums, whenever they were HEADed."""
    return {k: v for k, v in (a or {}).items() if k != "at"} == {k: v for k, v in (b or {}).items() if k != "at"}


def _previous(location_id: int, paths: list[str]) -> dict[str, _Previous]:
    """What the last applied scans learnt about these paths: one query per page.

    A listing page is a run of consecutive keys, and paths compare bytewise in Python, SQLite and
    PostgreSQL (the "C" collation), so its rows are one range of the (location, path) index. A page
    whose paths are not in order (an S3 Inventory data file may not be) is looked up by ``IN``.
    """
    found: dict[str, _Previous] = {}
    if not paths:
        return found
    fields = (
        "path",
        "etag",
        "size",
        "mtime",
        "facts",
        "checksum",
        "checksum_algo",
        "version_id",
        "legal_hold",
        "retain_until",
        "digests_text",
    )
    here = ShardFile.objects.filter(location_id=location_id).annotate(digests_text=Cast("digests", TextField()))
    if all(a < b for a, b in itertools.pairwise(paths)):
        wanted = set(paths)
        for path, *values in here.filter(path__gte=paths[0], path__lte=paths[-1]).values_list(*fields):
            if path in wanted:
                found[path] = _Previous(*values)
        return found
    for i in range(0, len(paths), PREVIOUS_BATCH):
        rows = here.filter(path__in=paths[i : i + PREVIOUS_BATCH])
        for path, *values in rows.values_list(*fields):
            found[path] = _Previous(*values)
    return found


class ObjectRows:
    """The staged rows of a listing's objects (``rows``), the facts of manifests read by ranged GETs and, in an
    Object Lock bucket listed without its lock state, every object HEADed, by a pool of threads.

    The requests go through its ``fetch.Fetcher``, which counts them. It says what the apply needs to know: whether
    every object was HEADed while listing (``head_all``) and whether the lock state came with the objects
    (``lock_listed``, an S3 Inventory report).
    """

    def __init__(
        self,
        client: Any,
        bucket: Bucket,
        prefix: str,
        notes: Notes,
        *,
        lock_enabled: bool,
        recheck: bool,
        known_paths: bool,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.location = bucket.location
        self.prefix = prefix
        self.notes = notes
        self.lock_enabled = lock_enabled  # the bucket has Object Lock: each object's lock state belongs in the row
        self.recheck = recheck  # a full pass: a HEAD's time alone is news
        self.known_paths = known_paths  # whether the location has any shard-file rows to reuse facts from
        self.head_all = False  # an Object Lock bucket listed without lock state: HEAD every object
        self.lock_listed = False  # the Object Lock state came with the objects (an S3 Inventory report)
        self.fetcher = Fetcher(client, bucket.bucket_name, prefix, notes)  # the ranged GETs and HEADs, counted

    def rows(self, pages: Iterator[list[s3.ObjectInfo]]) -> Iterator[Row]:
        """Rows of every page, the ranged GETs of up to ``PAGES_IN_FLIGHT`` pages under way meanwhile.

        A page's rows are yielded once its own reads are done (oldest page first), so staging never
        waits on a page whose reads have just started while an older one is ready, and the listing
        threads keep listing. Memory stays bounded by the pages in flight.
        """
        pool = ThreadPoolExecutor(max_workers=FETCH_THREADS, thread_name_prefix="s3-fetch")
        flight: collections.deque[list[tuple[_Job, Future | None]]] = collections.deque()
        try:
            for objects in pages:
                flight.append(self._page_jobs(objects, pool))
                while flight and (len(flight) > PAGES_IN_FLIGHT or all(f is None or f.done() for _, f in flight[0])):
                    yield from self._page_rows(flight.popleft())
            while flight:
                yield from self._page_rows(flight.popleft())
        finally:
            # On a failure the rest of the requests are not worth waiting for.
            pool.shutdown(wait=True, cancel_futures=True)

    def _page_rows(self, jobs: list[tuple[_Job, Future | None]]) -> Iterator[Row]:
        for job, future in jobs:
            info, facts = future.result() if future is not None else (None, None)
            yield self._row(job, info, facts)

    def _page_jobs(self, objects: list[s3.ObjectInfo], pool: ThreadPoolExecutor) -> list[tuple[_Job, Future | None]]:
        named: list[tuple[str, s3.ObjectInfo]] = []
        for obj in objects:
            path = obj.key[len(self.prefix) :]
            if obj.key.endswith("/") and obj.size == 0:
                continue  # a "folder" placeholder made by a console or a tool, not a file
            try:
                check_path(path)
            except ValueError as exc:
                self.notes.skip(obj.key, str(exc))
                continue
            named.append((path, obj))
        previous = _previous(self.location.pk, [path for path, _ in named]) if self.known_paths else {}
        jobs: list[tuple[_Job, Future | None]] = []
        for path, obj in named:
            prev = previous.get(path)
            unchanged = (
                prev is not None
                and prev.etag == obj.etag
                and prev.size == obj.size
                and prev.mtime == obj.last_modified
                and bool(obj.etag)
            )
            kind = facts_kind(path.rsplit("/", 1)[-1])
            reuse_facts = unchanged and isinstance(prev.facts, dict) and "error" not in prev.facts
            archived = obj.storage_class.upper() in s3.RESTORE_CLASSES
            if kind is not None and not reuse_facts and archived:
                self.notes.archived += 1
            job = _Job(
                path=path,
                obj=obj,
                previous=prev if unchanged else None,
                fetch_facts=kind is not None and not reuse_facts and not archived,
                head=self.lock_enabled and not obj.lock_known,
            )
            self.head_all = self.head_all or job.head
            self.lock_listed = self.lock_listed or obj.lock_known
            future = (
                pool.submit(self.fetcher.fetch, path, obj, head=job.head, read_facts=job.fetch_facts)
                if job.fetch_facts or job.head
                else None
            )
            jobs.append((job, future))
        return jobs

    def _row(self, job: _Job, info: s3.HeadInfo | None, fetched: dict | None) -> Row:
        obj, prev = job.obj, job.previous
        facts = fetched if job.fetch_facts else (prev.facts if prev is not None else None)
        checksum = algo = version_id = ""
        legal_hold: bool | None = None
        retain_until: datetime | None = None
        digests: str | None = None
        if prev is not None:
            # Unchanged since the last scan: what was learnt then still holds.
            checksum, algo, version_id = prev.checksum, prev.checksum_algo, prev.version_id
            legal_hold, retain_until = prev.legal_hold, prev.retain_until
            digests = prev.digests
        if info is not None:
            if info.checksum or prev is None:
                checksum, algo = info.checksum, info.checksum_algo
            if (info.digests or prev is None) and (
                self.recheck or not same_digests(info.digests, digests_loads(digests))
            ):
                # An Object Lock bucket is HEADed on every listing: the time of the HEAD alone is news
                # only on a recheck, so an unchanged object's row stays as it was in between.
                digests = digests_dumps(info.digests)
            version_id = info.version_id or version_id
            legal_hold, retain_until = info.legal_hold, info.retain_until
        if obj.lock_known:
            legal_hold, retain_until = obj.legal_hold, obj.retain_until
        if obj.version_id:
            version_id = obj.version_id
        return Row(
            path=job.path,
            size=obj.size,
            mtime=obj.last_modified,
            checksum=checksum,
            checksum_algo=algo if checksum else "",
            facts=_facts_text(facts if isinstance(facts, dict) else None),
            storage_class=obj.storage_class,
            tier=self.bucket.tier_of(obj.storage_class),
            etag=obj.etag[:200],
            version_id=version_id[:1024],
            legal_hold=legal_hold,
            retain_until=retain_until,
            digests=digests,
        )
