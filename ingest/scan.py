"""Bucket scans: registering buckets, starting scans one at a time, and applying what a scan finds.

A scan turns a bucket (below its prefix) into the same staged snapshot a host inventory becomes,
and applies it through the same set-based merge (``ingest.inventory``): all or nothing, a full
snapshot when it succeeds, nothing applied and nothing marked gone when it fails.

Where the objects come from:

- **Listing** (``ListObjectsV2`` through boto3's paginator). A bucket that fits in one page costs one
  request. A bigger one is probed with ``Delimiter="/"``; when that shows several top-level prefixes
  they are listed side by side by a small thread pool. Staging does not care about order, so pages
  are staged as they arrive.
- **S3 Inventory reports**, when the bucket has ``inventory_report_uri``: the newest
  ``manifest.json`` below it is read (its ``manifest.checksum`` checked when present), then each
  CSV.gz data file is downloaded, its MD5 checked against the manifest, and parsed with the
  manifest's ``fileSchema``. Only current versions that are not delete markers are kept. Parquet
  and ORC reports are refused with a clear error.

What each object becomes: a ``Row`` whose path is the key relative to the prefix (keys that are no
safe path are skipped and counted in a warning; "folder" placeholder keys ending in ``/`` are skipped
silently), with its size, LastModified, ETag, storage class and the tier it maps to. Objects whose
names recognition needs facts about (DCP ``.metadata``, index JSON, sidecars, trackers, safetensors
headers, ``torch.save`` tails) are read with ranged GETs by the agent's own extractors, those of
several pages in flight while the listing goes on. An object whose ETag, size and LastModified are
unchanged since the last applied scan keeps its earlier facts, checksum and version id without a
request; what the last scans know of a page is found with one range query of the (location, path)
index per page.

HEAD requests (one per object, a thousand times a listing's cost) come **after** the snapshot is
applied, as tasks of their own: with ``fetch_checksums`` (and in versioned buckets, for the version
id) the objects this scan added or changed are split into chunks of ``HEAD_CHUNK`` in the transaction
that applies the snapshot (``HeadChunk`` rows), and each chunk is a Celery task that any worker takes,
retried with backoff while the store throttles (``head_chunk_run``): HEADed, written conditional on
the ETag listed and its checkpoints verified again, in one transaction under the location's lock.
The scan's record counts the objects done and failed and says when the last chunk finished. In a
bucket with Object Lock every object is HEADed on every listing, while listing, since a legal hold
can change without the object changing and belongs in the snapshot (S3 Inventory reports carry the
lock state instead).

A HEAD keeps every checksum the store has (``fleet.s3.stored_digests``: full CRCs and SHAs, a
multipart object's composite with its part count and part size, a true content MD5) in
``ShardFile.digests``, with when it was HEADed and when the store computed them. Bit rot and a
store's own repairs change no ETag, so every ``Bucket.recheck_days`` a scan is a recheck: its
checksum phase HEADs every present object, not only what it added or changed (``recheck_due``).

In a versioned bucket the non-current versions and delete markers are listed too
(``ListObjectVersions``) and recorded as ``ObjectVersion`` rows: bytes that are billed though no
listing of objects shows them.
"""

from __future__ import annotations

import array
import collections
import csv
import gzip
import hashlib
import io
import itertools
import json
import logging
import queue
import random
import re
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from django.conf import settings
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import F, OuterRef, Q, Subquery, Sum, TextField
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audit.actor import Actor
from audit.services import audit as audit_event
from catalog.digests import dumps as digests_dumps
from catalog.digests import loads as digests_loads
from catalog.formats.base import FileEntry
from catalog.models import ShardFile, Team
from ckptfleet.celery import task
from ckptfleet.errors import DomainError
from ckptfleet.rules import is_storage_class
from fleet import s3
from fleet.agent import facts_kind, stream_facts
from fleet.choices import AddressingStyle, InventorySource, InventoryStatus, LocationKind, Tier
from fleet.models import (
    Bucket,
    HeadChunk,
    HeadChunkState,
    Inventory,
    MultipartUpload,
    ObjectVersion,
    StorageLocation,
)
from fleet.services import location_add
from ingest.inventory import (
    STAGED_COLUMNS,
    InventoryError,
    MergeCounts,
    Row,
    apply_staged,
    check_path,
    end_apply,
    fail,
    flush_every,
    log_applied,
    stage_rows,
    staged_group,
    unstage,
)

log = logging.getLogger(__name__)

SCANNER = "ckptfleet-scanner/1"
LISTING_THREADS = 8
FETCH_THREADS = 8
PAGES_IN_FLIGHT = 4  # listing pages whose ranged GETs may be under way at once
HEAD_THREADS = 16  # HEAD requests wait on the store, not on this process
HEAD_CHUNK = 2000  # objects of one checksum-phase task: HEADed, then written and re-verified in one transaction
HEAD_RETRIES = 5  # retries of a chunk while the store throttles, fails with 5xx or times out
HEAD_BACKOFF = 5.0  # seconds before a chunk's first retry; doubled each time, with jitter
HEAD_BACKOFF_MAX = 300.0
HEAD_STALLED = timedelta(minutes=30)  # a scan's chunks with no progress this long are queued again
PARALLEL_MIN_PREFIXES = 2  # top-level prefixes in the probe that make a big bucket worth listing in parallel
SKIPPED_EXAMPLES = 5
PREVIOUS_BATCH = 500
MAX_RECHECK_DAYS = 3650
# Files of a first scan recognised while the listing goes on, kept (with their verdicts) until the apply;
# the run directories beyond this are recognised at the apply, from the staged rows. Bounds the memory.
PREJUDGE_MAX_FILES = 250_000
WHOLE_KINDS = frozenset({"dcp_metadata", "hf_index", "trainer_state", "json"})  # facts read from the whole file
BEAT_ACTOR = Actor.system("beat: scheduled bucket scan")
ACTIVE = (InventoryStatus.RECEIVED, InventoryStatus.PROCESSING)

_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$")
_REGION = re.compile(r"^[a-z0-9-]{0,40}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# S3 Inventory report columns this scanner understands; the others are ignored.
_REPORT_REQUIRED = ("Key", "Size")


# --- registering a bucket -------------------------------------------------------------------------


def _check_endpoint(url: str) -> str:
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DomainError(f"the endpoint URL {url!r} must look like https://s3.example.com")
    if parts.username or parts.password:
        raise DomainError("the endpoint URL must not carry credentials; give a credentials reference instead")
    if parts.query or parts.fragment:
        raise DomainError("the endpoint URL must not have a query or fragment")
    url = url.rstrip("/")
    if len(url) > 200:
        raise DomainError("the endpoint URL is longer than 200 characters")
    return url


def _check_prefix(prefix: str) -> str:
    prefix = (prefix or "").lstrip("/")
    if not prefix:
        return ""
    try:
        check_path(prefix.rstrip("/"))
    except ValueError as exc:
        raise DomainError(f"the prefix {prefix!r} is not usable: {exc}") from None
    prefix = prefix.rstrip("/") + "/"
    if len(prefix.encode()) > 1024:
        raise DomainError("the prefix is longer than 1024 bytes, the longest S3 key")
    return prefix


def _check_tier_map(mapping: dict[str, str] | None) -> dict[str, str]:
    checked: dict[str, str] = {}
    for storage_class, tier in (mapping or {}).items():
        key = str(storage_class).strip().upper()
        if not is_storage_class(key):
            raise DomainError(f"{storage_class!r} is not a storage class name (e.g. STANDARD_IA, GLACIER)")
        if tier not in Tier.values:
            raise DomainError(f"unknown tier {tier!r} for {key}; use one of {', '.join(Tier.values)}")
        checked[key] = tier
    return checked


def bucket_add(
    *,
    name: str,
    bucket_name: str,
    prefix: str = "",
    endpoint_url: str = "",
    region_name: str = "",
    addressing_style: str = AddressingStyle.AUTO,
    credentials: str = "default",
    path_template: str = "{team}/{run}",
    tier: str = Tier.OBJECT_STANDARD,
    storage_class_tiers: dict[str, str] | None = None,
    default_team: Team | None = None,
    site: str = "",
    region: str = "",
    scan_every_minutes: int = 60,
    fetch_checksums: bool = True,
    recheck_days: int = 7,
    inventory_report_uri: str = "",
    actor: Actor,
) -> Bucket:
    """Register a bucket (and prefix) as a storage location; it is scanned on schedule and on demand.

    ``credentials`` is a reference resolved by the workers (see ``fleet.s3``), never a secret.
    ``tier`` is the location's tier for storage classes the mapping does not know; ``region``
    (the failure domain) defaults to the bucket's region. ``recheck_days``: every object is HEADed
    again when the last full pass is that old (0: never). Two registrations of one bucket whose
    prefixes overlap are refused: their objects would be counted twice.
    """
    prefix, endpoint_url, tiers, inventory_report_uri = _checked_bucket_settings(
        bucket_name=bucket_name,
        prefix=prefix,
        endpoint_url=endpoint_url,
        region_name=region_name,
        addressing_style=addressing_style,
        credentials=credentials,
        storage_class_tiers=storage_class_tiers,
        scan_every_minutes=scan_every_minutes,
        recheck_days=recheck_days,
        inventory_report_uri=inventory_report_uri,
    )
    with transaction.atomic():
        _refuse_overlap(endpoint_url, bucket_name, prefix)
        location = location_add(
            host=None,
            name=name,
            kind=LocationKind.BUCKET,
            tier=tier,
            root_path=f"s3://{bucket_name}/{prefix}",
            path_template=path_template,
            default_team=default_team,
            site=site,
            region=region or region_name,
            actor=actor,
        )
        bucket = Bucket.objects.create(
            location=location,
            endpoint_url=endpoint_url,
            region_name=region_name,
            bucket_name=bucket_name,
            prefix=prefix,
            addressing_style=addressing_style,
            credentials=credentials,
            storage_class_tiers=tiers,
            scan_every_minutes=scan_every_minutes,
            fetch_checksums=fetch_checksums,
            recheck_days=recheck_days,
            inventory_report_uri=inventory_report_uri,
        )
        audit_event(
            actor,
            "bucket.add",
            target_type="location",
            target_id=location.pk,
            target_label=location.name,
            after={
                "bucket": bucket_name,
                "prefix": prefix,
                "endpoint_url": endpoint_url,
                "region_name": region_name,
                "addressing_style": addressing_style,
                "credentials": credentials,  # a reference such as "file:prod-ro", never a key
                "storage_class_tiers": tiers,
                "scan_every_minutes": scan_every_minutes,
                "fetch_checksums": fetch_checksums,
                "recheck_days": recheck_days,
                "inventory_report_uri": inventory_report_uri,
            },
        )
    return bucket


def _checked_bucket_settings(
    *,
    bucket_name: str,
    prefix: str,
    endpoint_url: str,
    region_name: str,
    addressing_style: str,
    credentials: str,
    storage_class_tiers: dict[str, str] | None,
    scan_every_minutes: int,
    recheck_days: int,
    inventory_report_uri: str,
) -> tuple[str, str, dict[str, str], str]:
    """Refuse a bucket registration's bad values (``DomainError`` saying which); return the normalised prefix,
    endpoint, storage-class tier map and S3 Inventory report location."""
    if not _BUCKET_NAME.match(bucket_name or "") or ".." in bucket_name:
        raise DomainError(f"{bucket_name!r} is not a bucket name (3-63 lowercase letters, digits, '.', '-', '_')")
    prefix = _check_prefix(prefix)
    endpoint_url = _check_endpoint(endpoint_url)
    if not _REGION.match(region_name or ""):
        raise DomainError(f"{region_name!r} is not a region name (e.g. eu-west-1, auto)")
    if addressing_style not in AddressingStyle.values:
        raise DomainError(
            f"unknown addressing style {addressing_style!r}; use one of {', '.join(AddressingStyle.values)}"
        )
    try:
        s3.check_credentials_ref(credentials)
    except ValueError as exc:
        raise DomainError(str(exc), code="bad_credentials_reference") from None
    tiers = _check_tier_map(storage_class_tiers)
    if not isinstance(scan_every_minutes, int) or not (scan_every_minutes == 0 or scan_every_minutes >= 5):
        raise DomainError("scan every 0 minutes (only on demand) or every 5 minutes or more")
    _check_recheck_days(recheck_days)
    if inventory_report_uri:
        try:
            report_bucket, report_prefix = s3.parse_uri(inventory_report_uri)
        except ValueError as exc:
            raise DomainError(f"the S3 Inventory report location is not usable: {exc}") from None
        inventory_report_uri = f"s3://{report_bucket}/{report_prefix}"
    return prefix, endpoint_url, tiers, inventory_report_uri


def _refuse_overlap(endpoint_url: str, bucket_name: str, prefix: str) -> None:
    """Two registrations of one bucket whose prefixes overlap would count their objects twice."""
    for other in Bucket.objects.filter(endpoint_url=endpoint_url, bucket_name=bucket_name).select_related("location"):
        if other.prefix.startswith(prefix) or prefix.startswith(other.prefix):
            raise DomainError(
                f"s3://{bucket_name}/{prefix} overlaps s3://{bucket_name}/{other.prefix}, registered as "
                f"{other.location.name!r}: its objects would be counted twice",
                code="exists",
            )


def _check_recheck_days(days: object) -> None:
    if isinstance(days, bool) or not isinstance(days, int) or not 0 <= days <= MAX_RECHECK_DAYS:
        raise DomainError(f"recheck every 0 days (never) to {MAX_RECHECK_DAYS:,} days, not {days!r}")


def bucket_set(*, location: StorageLocation, recheck_days: int, actor: Actor) -> Bucket:
    """Change how often every object of a bucket is HEADed again for its checksums (0: never), audited.

    The next scan is a recheck when the last full pass is older than the new setting.
    """
    _check_recheck_days(recheck_days)
    with transaction.atomic():
        bucket = Bucket.objects.select_for_update().filter(location_id=location.pk).first()
        if bucket is None:
            raise DomainError(f"{location.name} is not a bucket", code="not_a_bucket")
        before = bucket.recheck_days
        if before != recheck_days:
            bucket.recheck_days = recheck_days
            bucket.save(update_fields=["recheck_days"])
            audit_event(
                actor,
                "bucket.set",
                target_type="location",
                target_id=location.pk,
                target_label=location.name,
                before={"recheck_days": before},
                after={"recheck_days": recheck_days},
            )
    return bucket


# --- starting scans -------------------------------------------------------------------------------


def scan_start(*, location: StorageLocation, actor: Actor, audit: bool = True) -> Inventory:
    """Start a scan of a bucket location: an Inventory waiting for a worker, queued once this commits.

    The database allows one active scan per location (a partial unique index), so two starts racing
    each other cannot both win; the loser gets ``DomainError(code="scan_running")``. On-demand scans
    are audited; the scheduled ones (``audit=False``) would only repeat the schedule.
    """

    bucket = Bucket.objects.filter(location_id=location.pk).values("inventory_report_uri").first()
    if bucket is None:
        raise DomainError(
            f"{location.name} is not a bucket: hosts report their own inventories with the agent",
            code="not_a_bucket",
        )
    source = InventorySource.S3_INVENTORY if bucket["inventory_report_uri"] else InventorySource.BUCKET_LISTING
    try:
        with transaction.atomic():
            inventory = Inventory.objects.create(location_id=location.pk, source=source, agent=SCANNER)
            if audit:
                audit_event(
                    actor,
                    "location.scan",
                    target_type="location",
                    target_id=location.pk,
                    target_label=location.name,
                    after={"inventory": inventory.pk, "source": source},
                )
            transaction.on_commit(lambda: task("ingest.tasks.scan_bucket").delay(inventory.pk))
    except IntegrityError:
        running = (
            Inventory.objects.filter(location_id=location.pk, status__in=ACTIVE)
            .exclude(source=InventorySource.AGENT)
            .first()
        )
        if running is None:
            raise
        raise DomainError(
            f"a scan of {location.name} is already {running.status} (inventory #{running.pk}); "
            "one scan of a bucket runs at a time, so wait for it to finish",
            code="scan_running",
            http_status=409,
        ) from None
    return inventory


def scan_due(*, now: datetime | None = None) -> list[Inventory]:
    """Start a scan of every scheduled bucket whose last scan started ``scan_every_minutes`` ago or more.

    The last *started* scan counts, failed ones included, so a failing bucket is retried on its own
    schedule rather than every minute. A bucket whose scan is still running is left alone.
    """
    now = now or timezone.now()
    last = (
        Inventory.objects.filter(location_id=OuterRef("location_id"))
        .exclude(source=InventorySource.AGENT)
        .order_by("-received_at")
        .values("received_at")[:1]
    )
    due = (
        Bucket.objects.filter(scan_every_minutes__gt=0)
        .select_related("location")
        .annotate(last_scan=Subquery(last))
        .order_by("location__name")
    )
    started: list[Inventory] = []
    for bucket in due:
        if bucket.last_scan and bucket.last_scan > now - timedelta(minutes=bucket.scan_every_minutes):
            continue
        try:
            started.append(scan_start(location=bucket.location, actor=BEAT_ACTOR, audit=False))
        except DomainError as exc:
            log.info("scheduled scan of %s not started: %s", bucket.location.name, exc.message)
    return started


# --- running a scan -------------------------------------------------------------------------------


def scan_run(inventory_id: int, *, claim: str = "", queue: str | None = None) -> Inventory | None:
    """``_scan_run`` with the cyclic garbage collector paused: a listing of a large bucket makes millions of
    objects that form no cycle, as an ingest does (``ckptfleet.heap.collector_paused``)."""
    from ckptfleet.heap import collector_paused

    with collector_paused():
        return _scan_run(inventory_id, claim=claim, queue=queue)


def _scan_run(inventory_id: int, *, claim: str = "", queue: str | None = None) -> Inventory | None:
    """Scan the bucket of one waiting scan and apply the snapshot, all or nothing. Safe to run twice.

    ``claim`` is the task id: a redelivery of the same task (its worker died) may take the scan over
    and start again; another task may not. ``queue`` is where the checksum phase's chunks go (the
    queue the scan came from; None: the default one). A listing that fails for good (after botocore's
    retries with backoff) fails the scan with the store's error code and message: nothing is applied
    and nothing is marked gone.
    """
    waiting = Q(status=InventoryStatus.RECEIVED)
    if claim:
        waiting |= Q(status=InventoryStatus.PROCESSING, claimed_by=claim)
    claimed = (
        Inventory.objects.filter(waiting, pk=inventory_id)
        .exclude(source=InventorySource.AGENT)
        .update(status=InventoryStatus.PROCESSING, started_at=timezone.now(), claimed_by=claim)
    )
    if claimed != 1:
        log.info("scan %s is not waiting to run; nothing to do", inventory_id)
        return None
    inventory = Inventory.objects.select_related("location").get(pk=inventory_id)
    bucket = Bucket.objects.select_related("location").filter(location_id=inventory.location_id).first()
    if bucket is None:
        return fail(inventory, "the location has no bucket settings, so there is nothing to scan", None)
    unstage(inventory.pk)  # a worker killed mid-scan may have left rows behind
    started = time.monotonic()
    scanner = _Scanner(inventory, bucket)
    scanner.queue = queue
    try:
        files, total = scanner.stage()
    except s3.S3Error as exc:
        unstage(inventory.pk)
        return fail(inventory, f"{scanner.what} failed: {exc.message}. Nothing was applied or marked gone.", None)
    except InventoryError as exc:
        unstage(inventory.pk)
        return fail(inventory, f"{scanner.what}: {exc.reason}. Nothing was applied or marked gone.", exc.line)
    except DatabaseError as exc:
        unstage(inventory.pk)
        return fail(inventory, f"the database refused a value: {str(exc).splitlines()[0]}", None)
    except Exception as exc:
        # A bug must not leave the scan "processing", which would block every later scan of the bucket.
        unstage(inventory.pk)
        fail(inventory, f"internal error: {type(exc).__name__}: {exc}", None)
        raise
    applied = scanner.apply(files=files, total=total, started=started, claim=claim)
    if applied is not None and applied.status == InventoryStatus.APPLIED:
        scanner.fetch_stored()
        applied.refresh_from_db()
        _mirror_holds(applied)
    return applied


def _mirror_holds(inventory: Inventory) -> None:
    """Holds cover objects that appear after them: mirror them onto what the scan found (``actions.objectlock``)."""
    from actions.objectlock import mirror_after_scan

    mirror_after_scan(inventory=inventory)


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


@dataclass
class _Notes:
    """Warnings of an applied scan, kept in the inventory's ``error`` field (which the UI shows for failures only)."""

    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    unheaded: int = 0
    archived: int = 0
    unheaded_reason: str = ""
    other: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def skip(self, key: str, why: str) -> None:
        self.skipped += 1
        if len(self.skipped_examples) < SKIPPED_EXAMPLES:
            self.skipped_examples.append(f"{_printable(key)} ({why})")

    def head_failed(self, error: s3.S3Error) -> None:
        with self.lock:
            self.unheaded += 1
            self.unheaded_reason = self.unheaded_reason or error.message

    def text(self) -> str:
        parts = []
        if self.skipped:
            parts.append(
                f"warning: skipped {self.skipped} key(s) that are not safe paths below the prefix, e.g. "
                + "; ".join(self.skipped_examples)
            )
        if self.unheaded:
            parts.append(
                f"warning: {self.unheaded} object(s) could not be HEADed, so their checksum, version and "
                f"lock state are unknown: {self.unheaded_reason}"
            )
        if self.archived:
            parts.append(
                f"note: {self.archived} manifest object(s) in archive storage classes were not read (that needs a "
                "restore); their checkpoints are judged from file names and sizes"
            )
        parts.extend(f"warning: {line}" for line in self.other)
        return "\n".join(parts)[:2000]


def _printable(key: str) -> str:
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", key)
    return repr(text if len(text) <= 200 else text[:197] + "...")


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


class _Stream:
    """The open run directories of one top-level prefix of a listing (its keys come in order)."""

    __slots__ = ("deep", "deep_group", "last", "last_group", "open")

    def __init__(self) -> None:
        self.last: str | None = None  # the last path seen
        self.last_group: str | None = None
        self.deep = ""  # "group/" of the last group when it is a run directory: its whole subtree is in it
        self.deep_group = ""
        self.open: dict[str, list[FileEntry] | None] = {}  # None: too big to keep, recognised at the apply


class _Files:
    """The files of a recognised run directory as the apply needs them (path, size, mtime, checksum), packed:
    about half the memory of their ``FileEntry`` values, which are made again for the apply. A manifest's
    facts (a DCP ``.metadata`` names every rank's file) served recognition and are not kept."""

    __slots__ = ("checksums", "digests", "mtimes", "paths", "sizes")

    def __init__(self, entries: list[FileEntry]) -> None:
        self.paths = [e.path for e in entries]
        self.sizes = array.array("q", [e.size for e in entries])
        self.mtimes = array.array("d", [e.mtime for e in entries])
        self.checksums = {
            i: (e.checksum, e.checksum_algo) for i, e in enumerate(entries) if e.checksum or e.checksum_algo
        }
        self.digests = {i: e.digests for i, e in enumerate(entries) if e.digests}

    def __len__(self) -> int:
        return len(self.paths)

    def entries(self) -> list[FileEntry]:
        sums, digests = self.checksums, self.digests
        return [
            FileEntry(path, size, mtime, None, *sums.get(i, (None, None)), digests.get(i))
            for i, (path, size, mtime) in enumerate(zip(self.paths, self.sizes, self.mtimes, strict=True))
        ]


class _PreJudge:
    """Recognition of a location's first listing, run directory by run directory, while the listing goes on.

    A listing returns keys in order within each top-level prefix (the parallel listing splits by those),
    so a run directory is complete once its prefix's listing has passed the end of its range (the same
    rule as ``ingest.inventory``'s one-pass ingest of a sorted upload). Each complete directory's files are
    recognised (``catalog.recognition.recognize``: pure Python, no database) by a thread of its own and
    kept with the verdict, so that the apply, still one transaction after the whole listing, only writes
    (``_apply_first``). The entries are what the apply would read back from the staged rows. A listing
    out of order, or a location that has shard files by the time of the apply, leaves everything to
    ``apply_staged``; run directories beyond ``PREJUDGE_MAX_FILES`` files are recognised at the apply.
    """

    def __init__(self, location: StorageLocation) -> None:
        from catalog.layout import PathTemplate

        self.template = PathTemplate.parse(location.path_template)
        self.depth = self.template.depth
        self.streams: dict[str, _Stream] = {}
        self.groups: set[str] = set()  # every group of the listing
        self.results: dict[str, tuple[_Files, list]] = {}  # group -> (its files, recognize(their entries))
        self.kept = 0  # files in open or recognised groups
        self.in_order = True
        self.closed = False  # the listing is complete
        self.finished = False  # and every run directory of it recognised
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._recognise, name="prejudge", daemon=True)
        self._thread.start()

    @classmethod
    def start(cls, location: StorageLocation) -> _PreJudge | None:
        try:
            return cls(location)
        except ValueError:  # a path template the apply will refuse with its own message
            return None

    def add(self, row: Row) -> None:
        if not self.in_order:
            return
        path = row.path
        cut = path.find("/")
        key = path[:cut] if cut >= 0 else ""
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = _Stream()
        if stream.last is not None and path <= stream.last:
            self._give_up()
            return
        stream.last = path
        if stream.deep and path.startswith(stream.deep):
            group = stream.deep_group
        else:
            group = self.template.group_of(path)
            if group != stream.last_group:
                for g in list(stream.open):
                    if g and g != group and not path.startswith(g + "/"):
                        self._done(g, stream.open.pop(g))
                stream.last_group = group
                deep = bool(group) and group.count("/") + 1 == self.depth
                stream.deep, stream.deep_group = (group + "/", group) if deep else ("", "")
        if group in stream.open:
            entries = stream.open[group]
        else:
            self.groups.add(group)
            entries = stream.open[group] = [] if self.kept < PREJUDGE_MAX_FILES else None
        if entries is None:
            return
        if self.kept >= PREJUDGE_MAX_FILES:
            self.kept -= len(entries)
            stream.open[group] = None
            return
        self.kept += 1
        entries.append(
            FileEntry(
                path=path,
                size=row.size,
                mtime=row.mtime.timestamp(),
                facts=json.loads(row.facts) if row.facts else None,
                checksum=row.checksum or None,
                checksum_algo=row.checksum_algo or None,
                digests=row.digests,
            )
        )

    def _done(self, group: str, entries: list[FileEntry] | None) -> None:
        if entries is not None:
            self._queue.put((group, entries))

    def _give_up(self) -> None:
        self.in_order = False
        self.streams, self.results, self.kept = {}, {}, 0

    def _recognise(self) -> None:
        from catalog.recognition import recognize

        while (item := self._queue.get()) is not None:
            group, entries = item
            try:
                found = recognize(entries)
            except Exception:  # recognised again at the apply, where the error fails the scan as it would
                log.exception("recognising %s while listing failed", group)
                continue
            self.results[group] = (_Files(entries), found)

    def close(self) -> None:
        """The listing is complete, so every open run directory is too: queue them, and the end."""
        if self.in_order:
            for stream in self.streams.values():
                for group, entries in stream.open.items():
                    self._done(group, entries)
            self.streams = {}
        self.closed = True
        self._queue.put(None)

    def finish(self) -> None:
        """Wait for the recognition of every run directory of the complete listing."""
        if not self.closed:
            self.close()
        self._thread.join()
        self.finished = True

    def stop(self) -> None:
        """The listing failed (or finished): end the thread, which holds nothing of the database."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def usable(self) -> bool:
        return self.finished and self.in_order


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
        from catalog.models import IngestRow

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


def _apply_first(inventory: Inventory, prejudged: _PreJudge, *, files: int, total: int, started: float) -> Inventory:
    """``ingest.inventory.apply_staged`` for a location's first snapshot whose run directories were recognised
    while listing: in one transaction, the copies are written and the staged rows inserted linked to them.

    Every staged path is new (the location has no shard-file rows, checked under its lock), so there
    is nothing to merge and nothing gone, and every run directory of the snapshot is judged, as
    ``apply_staged`` would; those recognised while listing are not read back nor recognised again.
    """
    from catalog.services import Judge

    location = inventory.location
    try:
        with transaction.atomic():
            location = StorageLocation.objects.select_for_update().get(pk=location.pk)
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


class _Scanner:
    """One run of one scan: lists (or reads the report of) a bucket and yields staged rows."""

    def __init__(self, inventory: Inventory, bucket: Bucket) -> None:
        self.inventory = inventory
        self.bucket = bucket
        self.location = bucket.location
        self.prefix = bucket.prefix if not bucket.prefix or bucket.prefix.endswith("/") else bucket.prefix + "/"
        self.report = bool(bucket.inventory_report_uri)
        where = f"s3://{bucket.bucket_name}/{self.prefix}"
        self.what = (
            f"reading the S3 Inventory report {bucket.inventory_report_uri} of {where}"
            if self.report
            else f"listing {where}"
        )
        self.notes = _Notes()
        self.client: Any = None
        self.versioning: str | None = None
        self.object_lock: bool | None = None
        self.uploads: list[s3.UploadInfo] | None = None
        self.lock_enabled = False
        self.versioned = False
        self.gets = 0
        self.heads = 0
        self.head_all = False  # an Object Lock bucket listed without lock state: HEAD every object
        self.recheck = False  # a full pass: every object HEADed again, not only what this scan added or changed
        self.lock_listed = False  # the Object Lock state came with the objects (an S3 Inventory report)
        self.known_paths = False  # whether the location has any shard-file rows to reuse facts from
        self.versions: list[s3.VersionInfo] | None = None
        self.queue: str | None = None  # where the checksum phase's chunks are queued (None: the default queue)
        self.prejudged: _PreJudge | None = None  # a first listing's run directories, recognised while listing
        self._count_lock = threading.Lock()

    # -- staging

    def stage(self) -> tuple[int, int]:
        """List the bucket (or read its report) into staged rows; then list its incomplete uploads."""
        self.client = s3.client_for(self.bucket)
        name = self.bucket.bucket_name
        self.versioning = s3.bucket_versioning(self.client, name)
        self.object_lock = s3.bucket_object_lock(self.client, name)
        if self.versioning is None or self.object_lock is None:
            self.notes.other.append(
                "the bucket's versioning or Object Lock configuration could not be read; the last known is kept"
            )
        self.versioned = (self.versioning if self.versioning is not None else self.bucket.versioning) in (
            "Enabled",
            "Suspended",
        )
        self.lock_enabled = bool(self.object_lock if self.object_lock is not None else self.bucket.object_lock)
        self.recheck = recheck_due(self.bucket, timezone.now())
        self.known_paths = ShardFile.objects.filter(location_id=self.location.pk).exists()
        if self.report:
            taken, pages = self._report_pages()
        else:
            taken, pages = timezone.now(), self._listing_pages()
        Inventory.objects.filter(pk=self.inventory.pk).update(taken_at=taken)
        self.inventory.taken_at = taken
        files = total = 0
        # A first listing's run directories are recognised as soon as the listing has passed them.
        prejudge = _PreJudge.start(self.location) if not (self.known_paths or self.report) else None
        # A batch at a time, each staged by its own call: the rows are made (and the last scan's
        # facts looked up, a database query) while no COPY holds the connection.
        batch: list[Row] = []
        try:
            for row in self._rows(pages):
                batch.append(row)
                if prejudge is not None:
                    prejudge.add(row)
                if len(batch) >= settings.INGEST_CHUNK_ROWS:
                    files, total = self._stage(batch, files, total)
                    batch = []
            if batch or not files:
                files, total = self._stage(batch, files, total)
            if prejudge is not None:
                prejudge.close()  # the last run directories are recognised while the uploads are listed
            self.uploads = s3.multipart_uploads(self.client, name, self.prefix)
            if self.uploads is None:
                self.notes.other.append("incomplete multipart uploads could not be listed; the last known are kept")
            if self.versioned:
                self.versions = self._noncurrent_versions()
            if prejudge is not None:
                prejudge.finish()
        finally:
            if prejudge is not None:
                prejudge.stop()
        self.prejudged = prejudge
        log.info(
            "scan %s of %s: %s objects staged, %s HEAD and %s ranged GET requests",
            self.inventory.pk,
            self.location.name,
            files,
            self.heads,
            self.gets,
        )
        return files, total

    def _stage(self, batch: list[Row], files: int, total: int) -> tuple[int, int]:
        staged, size = stage_rows(self.inventory, batch)
        files, total = files + staged, total + size
        self._progress(files, total)
        return files, total

    def _progress(self, files: int, total: int) -> None:
        Inventory.objects.filter(pk=self.inventory.pk).update(files_count=files, bytes_total=total)

    def _listing_pages(self) -> Iterator[list[s3.ObjectInfo]]:
        name = self.bucket.bucket_name
        pages = s3.list_pages(self.client, name, self.prefix)
        first = next(pages, None)
        if first is None:
            return
        if first.truncated:
            # More than a page: worth one more request to see whether the listing can be split.
            top = s3.list_pages(self.client, name, self.prefix, delimiter="/")
            probe = next(top, None)
            if probe is not None and len(probe.prefixes) >= PARALLEL_MIN_PREFIXES:
                pages.close()
                yield from self._parallel_pages(probe, top)
                return
            top.close()
        yield first.objects
        for page in pages:
            yield page.objects

    def _parallel_pages(self, probe: s3.Page, top: Iterator[s3.Page]) -> Iterator[list[s3.ObjectInfo]]:
        """The objects right below the prefix, then every top-level prefix listed by a pool of threads."""
        prefixes: list[str] = []
        for page in itertools.chain([probe], top):
            prefixes.extend(page.prefixes)
            if page.objects:
                yield page.objects
        results: queue.Queue = queue.Queue(maxsize=LISTING_THREADS * 4)
        stop = threading.Event()

        def put(item: tuple[str, Any]) -> bool:
            while not stop.is_set():
                try:
                    results.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def list_one(prefix: str) -> None:
            try:
                for page in s3.list_pages(self.client, self.bucket.bucket_name, prefix):
                    if not put(("page", page.objects)):
                        return
                put(("done", prefix))
            except BaseException as exc:  # handed to the consuming thread, which raises it
                put(("error", exc))

        pool = ThreadPoolExecutor(max_workers=LISTING_THREADS, thread_name_prefix="s3-list")
        try:
            for prefix in prefixes:
                pool.submit(list_one, prefix)
            remaining = len(prefixes)
            while remaining:
                kind, value = results.get()
                if kind == "page":
                    if value:
                        yield value
                elif kind == "done":
                    remaining -= 1
                else:
                    raise value
        finally:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)

    def _rows(self, pages: Iterator[list[s3.ObjectInfo]]) -> Iterator[Row]:
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
        previous = self._previous([path for path, _ in named]) if self.known_paths else {}
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
            jobs.append((job, pool.submit(self._fetch, job) if job.fetch_facts or job.head else None))
        return jobs

    def _previous(self, paths: list[str]) -> dict[str, _Previous]:
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
        here = ShardFile.objects.filter(location_id=self.location.pk).annotate(
            digests_text=Cast("digests", TextField())
        )
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

    def _fetch(self, job: _Job) -> tuple[s3.HeadInfo | None, dict | None]:
        """HEAD and/or read the facts of one object (in a pool thread: no database here)."""
        obj = job.obj
        info = self._head((0, job.path, obj.etag)) if job.head else None
        if not job.fetch_facts:
            return info, None
        name = job.path.rsplit("/", 1)[-1]
        # Manifests that are parsed whole come in one GET; shards only by their header and tail.
        whole = facts_kind(name) in WHOLE_KINDS and obj.size <= s3.MAX_SMALL_OBJECT
        reader = s3.RangedReader(
            self.client,
            self.bucket.bucket_name,
            obj.key,
            obj.size,
            etag=obj.etag,
            read_ahead=max(obj.size, 1) if whole else s3.READ_AHEAD,
        )
        with reader:
            facts = stream_facts(name, reader, obj.size)  # type: ignore[arg-type]
        with self._count_lock:
            self.gets += reader.requests
        if reader.error is not None and reader.error.transient:
            # The store is struggling, not the object unreadable: a failed scan, not a wrong fact.
            raise reader.error
        if reader.error is not None and reader.error.code == "InvalidObjectState":
            facts = None  # archived (an Intelligent-Tiering archive tier): not read, rather than unreadable
        return info, facts

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
                self.recheck or not _same_digests(info.digests, digests_loads(digests))
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

    # -- after the snapshot is applied: stored checksums, versions and lock state

    def fetch_stored(self) -> None:
        """Start the checksum phase planned when the snapshot was applied: one task per chunk, any worker's.

        HEAD is one request per object, a thousand times a listing's cost, so it is kept off the
        listing's path: the snapshot is applied first (new objects unverified, with the reason that
        their checksum is unknown), with the objects this scan added or changed split into chunks of
        ``HEAD_CHUNK`` (``_plan_heads``, in the same transaction). Each chunk is a task
        (``ingest.tasks.head_chunk``) that HEADs its objects, writes what the store says and verifies
        their checkpoints again (``head_chunk_run``), retried with backoff while the store struggles.
        The chunks go to the queue this scan came from. In-process (``CELERY_TASK_ALWAYS_EAGER``) they
        run here, one after another.
        """
        head_chunks_queue(self.inventory.pk, queue=self.queue)

    def _head(self, item: tuple[int, str, str]) -> s3.HeadInfo | None:
        """HEAD one object while listing an Object Lock bucket (in a pool thread: no database here)."""
        _pk, path, etag = item
        with self._count_lock:
            self.heads += 1
        try:
            return s3.head(self.client, self.bucket.bucket_name, self.prefix + path, etag=etag)
        except s3.S3Error as exc:
            if exc.transient:
                raise
            self.notes.head_failed(exc)
            return None

    def _noncurrent_versions(self) -> list[s3.VersionInfo] | None:
        """The bucket's non-current versions below the prefix; None when the store refuses to list them."""
        found: list[s3.VersionInfo] = []
        try:
            for page in s3.noncurrent_versions(self.client, self.bucket.bucket_name, self.prefix):
                found.extend(v for v in page if not (v.key.endswith("/") and v.size == 0))
        except s3.S3Error as exc:
            if exc.code in s3.UNSUPPORTED_CODES:
                self.notes.other.append(
                    f"non-current versions could not be listed ({exc.message}); the last known are kept"
                )
                return None
            raise
        return found

    # -- S3 Inventory reports

    def _report_pages(self) -> tuple[datetime, Iterator[list[s3.ObjectInfo]]]:
        """The newest report's creation time and its objects below the prefix, one data file at a time."""
        try:
            report_bucket, report_prefix = s3.parse_uri(self.bucket.inventory_report_uri)
        except ValueError as exc:
            raise InventoryError(None, str(exc)) from None
        newest = s3.newest_key(self.client, report_bucket, report_prefix, suffix="manifest.json")
        if newest is None:
            raise InventoryError(None, f"no manifest.json below {self.bucket.inventory_report_uri}")
        raw = s3.get_small(self.client, report_bucket, newest.key)
        if raw is None:
            raise InventoryError(None, f"s3://{report_bucket}/{newest.key} vanished while it was read")
        where = f"s3://{report_bucket}/{newest.key}"
        checksum = s3.get_small(
            self.client, report_bucket, newest.key[: -len("manifest.json")] + "manifest.checksum", limit=1024
        )
        if checksum is not None:
            expected = checksum.decode("ascii", "replace").strip().lower()
            actual = hashlib.md5(raw, usedforsecurity=False).hexdigest()
            if expected != actual:
                raise InventoryError(
                    None, f"{where} does not match its manifest.checksum (MD5 {actual}, expected {expected})"
                )
        try:
            manifest = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise InventoryError(None, f"{where} is not valid JSON") from None
        if not isinstance(manifest, dict):
            raise InventoryError(None, f"{where} is not a JSON object")
        fmt = str(manifest.get("fileFormat") or "")
        if fmt.upper() != "CSV":
            raise InventoryError(
                None, f"{where} is a {fmt or 'unknown'} report; only CSV reports are read (configure the report as CSV)"
            )
        source = manifest.get("sourceBucket")
        if source != self.bucket.bucket_name:
            raise InventoryError(None, f"{where} is a report of bucket {source!r}, not {self.bucket.bucket_name!r}")
        columns = [c.strip() for c in str(manifest.get("fileSchema") or "").split(",") if c.strip()]
        missing = [c for c in _REPORT_REQUIRED if c not in columns]
        if missing:
            raise InventoryError(None, f"{where} has no {', '.join(missing)} column in its fileSchema")
        files = manifest.get("files")
        if not isinstance(files, list) or not all(
            isinstance(f, dict) and isinstance(f.get("key"), str) and isinstance(f.get("MD5checksum"), str)
            for f in files
        ):
            raise InventoryError(None, f"{where} has no list of files with key and MD5checksum")
        try:
            created = datetime.fromtimestamp(int(manifest.get("creationTimestamp")) / 1000, UTC)
        except (TypeError, ValueError, OverflowError, OSError):
            created = newest.last_modified
        return created, self._report_objects(report_bucket, files, columns)

    def _report_objects(
        self, report_bucket: str, files: list[dict], columns: list[str]
    ) -> Iterator[list[s3.ObjectInfo]]:
        lock_known = "ObjectLockLegalHoldStatus" in columns
        for entry in files:
            key = entry["key"]
            with tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024) as spool:
                md5 = s3.download(self.client, report_bucket, key, spool)
                if md5 != entry["MD5checksum"].strip().lower():
                    raise InventoryError(
                        None,
                        f"the data file s3://{report_bucket}/{key} has MD5 {md5} but the manifest says "
                        f"{entry['MD5checksum']}: the report is damaged or was rewritten",
                    )
                spool.seek(0)
                yield from self._report_file(spool, key, columns, lock_known)

    def _report_file(self, spool: Any, key: str, columns: list[str], lock_known: bool) -> Iterator[list[s3.ObjectInfo]]:
        page: list[s3.ObjectInfo] = []
        line = 0
        try:
            text = io.TextIOWrapper(gzip.GzipFile(fileobj=spool, mode="rb"), encoding="utf-8", newline="")
            for line, record in enumerate(csv.reader(text), 1):
                if len(record) != len(columns):
                    raise InventoryError(line, f"{key}: {len(record)} fields but the fileSchema has {len(columns)}")
                obj = self._report_object(dict(zip(columns, record, strict=True)), lock_known)
                if obj is not None:
                    page.append(obj)
                    if len(page) >= s3.PAGE_SIZE:
                        yield page
                        page = []
        except (EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError, csv.Error) as exc:
            raise InventoryError(line + 1, f"{key} cannot be read: {exc}") from None
        except ValueError as exc:
            raise InventoryError(line, f"{key}: {exc}") from None
        if page:
            yield page

    def _report_object(self, rec: dict[str, str], lock_known: bool) -> s3.ObjectInfo | None:
        if rec.get("Bucket") and rec["Bucket"] != self.bucket.bucket_name:
            return None
        if rec.get("IsLatest", "true").lower() != "true" or rec.get("IsDeleteMarker", "false").lower() == "true":
            return None
        key = unquote_plus(rec["Key"])  # the report URL-encodes keys (a space as '+')
        if not key.startswith(self.prefix):
            return None
        if not rec["Size"].isdigit():
            raise ValueError(f"the size of {_printable(key)} is not a number")
        modified = _report_time(rec.get("LastModifiedDate", ""))
        if modified is None:
            raise ValueError(f"the LastModifiedDate of {_printable(key)} is not a date")
        hold = rec.get("ObjectLockLegalHoldStatus", "").upper()
        return s3.ObjectInfo(
            key=key,
            size=int(rec["Size"]),
            last_modified=modified,
            etag=rec.get("ETag", "").strip('"'),
            storage_class=rec.get("StorageClass", ""),
            version_id=rec.get("VersionId", ""),
            legal_hold=True if hold == "ON" else False if hold == "OFF" else None,
            retain_until=_report_time(rec.get("ObjectLockRetainUntilDate", "")),
            lock_known=lock_known,
        )

    # -- applying

    def apply(self, *, files: int, total: int, started: float, claim: str) -> Inventory | None:
        """Merge the staged snapshot, the multipart uploads and the bucket's state in one transaction."""
        inventory = self.inventory
        try:
            with transaction.atomic():
                still_mine = (
                    Inventory.objects.select_for_update()
                    .filter(pk=inventory.pk, status=InventoryStatus.PROCESSING, claimed_by=claim)
                    .exists()
                )
                if not still_mine:
                    # The sweep gave up on it (or another delivery took it): its result is not wanted now.
                    unstage(inventory.pk)
                    log.warning("scan %s was taken away while it ran; its result is dropped", inventory.pk)
                    return None
                # Uploads and versions first, under the lock the merge takes: the merge rolls up usage,
                # and what it sums of them must be this scan's, not the last one's.
                StorageLocation.objects.select_for_update().filter(pk=self.location.pk).first()
                now = timezone.now()
                self._apply_uploads(now)
                self._apply_versions(now)
                prejudged, self.prejudged = self.prejudged, None  # freed once applied
                if prejudged is not None and prejudged.usable():
                    inventory = _apply_first(inventory, prejudged, files=files, total=total, started=started)
                else:
                    inventory = apply_staged(inventory, files=files, total=total, started=started)
                self._plan_heads(inventory)
                state: dict[str, Any] = {}
                if self.versioning is not None:
                    state["versioning"] = self.versioning
                if self.object_lock is not None:
                    state["object_lock"] = self.object_lock
                if self.recheck:
                    state["rechecked_at"] = now
                if state:
                    Bucket.objects.filter(pk=self.bucket.pk).update(**state)
                notes = self.notes.text()
                if notes:
                    Inventory.objects.filter(pk=inventory.pk).update(error=notes)
        except Exception:
            unstage(inventory.pk)
            raise
        inventory.refresh_from_db()
        return inventory

    def _plan_heads(self, inventory: Inventory) -> None:
        """Split what this scan added or changed into HEAD chunks, in the transaction that applies it.

        On a recheck (``recheck_due``) every present object goes into the chunks, so that a checksum
        that changed or went without the ETag changing is seen and when each was last confirmed is
        refreshed. The chunks are rows, so a worker lost between the commit and the queueing loses no
        work: the sweep queues them again (``head_chunks_resend``). Keys go in path order, so a
        checkpoint's files mostly share a chunk and are verified again together.
        """
        if self.head_all or not (self.bucket.fetch_checksums or self.versioned):
            return  # nothing to fetch, or everything was HEADed while listing (an Object Lock bucket)
        rows = ShardFile.objects.filter(location_id=self.location.pk, gone_at__isnull=True)
        if not self.recheck:
            rows = rows.filter(changed_by_id=inventory.pk)
        rows = rows.exclude(etag="").order_by("path").values_list("path", "etag")
        # A lock bucket's state came with the listing (HEADed) or its report, and belongs to the snapshot.
        write_lock_state = not (self.lock_enabled or self.lock_listed)
        chunks: list[HeadChunk] = []
        items: list[list[str]] = []
        total = 0

        def close() -> None:
            chunks.append(
                HeadChunk(
                    inventory_id=inventory.pk,
                    location_id=self.location.pk,
                    seq=len(chunks),
                    items=items,
                    size=len(items),
                    write_lock_state=write_lock_state,
                )
            )

        for path, etag in rows.iterator(chunk_size=5000):
            items.append([path, etag])
            total += 1
            if len(items) >= HEAD_CHUNK:
                close()
                items = []
        if items:
            close()
        HeadChunk.objects.bulk_create(chunks, batch_size=20)
        Inventory.objects.filter(pk=inventory.pk).update(
            checksums_total=total,
            checksums_done=0,
            checksums_failed=0,
            checksums_finished_at=None if total else timezone.now(),
        )
        if not total:
            log.info(
                "scan %s stored: 0 HEAD requests after the snapshot, 0 files updated, 0 copies re-verified, in 0.00 s "
                "(nothing added or changed)",
                inventory.pk,
            )

    def _apply_uploads(self, now: datetime) -> None:
        if self.uploads is None:
            return  # unknown is not none: leave what the last scan found
        existing = {u.upload_id: u for u in MultipartUpload.objects.filter(location_id=self.location.pk)}
        seen: set[str] = set()
        new: list[MultipartUpload] = []
        changed: list[MultipartUpload] = []
        fields = ["key", "initiated_at", "storage_class", "parts", "bytes", "gone_at"]
        for up in self.uploads:
            if up.upload_id in seen:
                continue
            seen.add(up.upload_id)
            values = {
                "key": up.key,
                "initiated_at": up.initiated,
                "storage_class": up.storage_class[:32],
                "parts": up.parts,
                "bytes": up.bytes,
                "gone_at": None,
            }
            row = existing.get(up.upload_id)
            if row is None:
                new.append(
                    MultipartUpload(location_id=self.location.pk, upload_id=up.upload_id, first_seen_at=now, **values)
                )
            elif any(getattr(row, k) != v for k, v in values.items()):
                for k, v in values.items():
                    setattr(row, k, v)
                changed.append(row)
        MultipartUpload.objects.bulk_create(new, batch_size=1000)
        MultipartUpload.objects.bulk_update(changed, fields, batch_size=1000)
        vanished = [u.pk for uid, u in existing.items() if uid not in seen and u.gone_at is None]
        for i in range(0, len(vanished), 1000):
            MultipartUpload.objects.filter(pk__in=vanished[i : i + 1000]).update(gone_at=now)

    def _apply_versions(self, now: datetime) -> None:
        """Record the non-current versions this scan found; mark gone those it no longer finds."""
        if self.versions is None:
            if self.versioned:
                return  # unknown is not none: leave what the last scan found
            # Versioning never enabled (or the store has none): nothing non-current can exist.
            self.versions = []
        # Gone ones too: a version found again (a listing that missed it) is revived, not duplicated.
        existing = {
            (v.key, v.version_id): v
            for v in ObjectVersion.objects.filter(location_id=self.location.pk).only(
                "pk", "key", "version_id", "storage_class", "gone_at"
            )
        }
        seen: set[tuple[str, str]] = set()
        new: list[ObjectVersion] = []
        changed: list[ObjectVersion] = []
        for v in self.versions:
            ident = (v.key, v.version_id[:1024])
            if ident in seen or not v.version_id:
                continue
            seen.add(ident)
            row = existing.get(ident)
            if row is None:
                new.append(
                    ObjectVersion(
                        location_id=self.location.pk,
                        key=v.key,
                        version_id=v.version_id[:1024],
                        size=v.size,
                        last_modified=v.last_modified,
                        etag=v.etag[:200],
                        storage_class=v.storage_class[:32],
                        delete_marker=v.delete_marker,
                        first_seen_at=now,
                    )
                )
            elif row.storage_class != v.storage_class[:32] or row.gone_at is not None:
                row.storage_class = v.storage_class[:32]  # a lifecycle transition
                row.gone_at = None
                changed.append(row)
        ObjectVersion.objects.bulk_create(new, batch_size=1000)
        ObjectVersion.objects.bulk_update(changed, ["storage_class", "gone_at"], batch_size=1000)
        vanished = [row.pk for ident, row in existing.items() if ident not in seen and row.gone_at is None]
        for i in range(0, len(vanished), 1000):
            ObjectVersion.objects.filter(pk__in=vanished[i : i + 1000]).update(gone_at=now)


# --- the checksum phase: HEAD chunks, one task each -----------------------------------------------


class ChunkRetry(Exception):
    """A chunk met a store that may answer later (throttling, 5xx, a timeout): its task retries it."""

    def __init__(self, error: s3.S3Error) -> None:
        super().__init__(error.message)
        self.error = error


def head_chunks_queue(inventory_id: int, *, queue: str | None = None) -> int:
    """Queue a task for each pending chunk of one scan's checksum phase (once this transaction commits)."""

    ids = list(
        HeadChunk.objects.filter(inventory_id=inventory_id, state=HeadChunkState.PENDING)
        .order_by("seq")
        .values_list("pk", flat=True)
    )
    options = {"queue": queue} if queue else {}
    for pk in ids:
        transaction.on_commit(lambda pk=pk: task("ingest.tasks.head_chunk").apply_async((pk,), **options))
    return len(ids)


def head_chunks_resend(*, now: datetime | None = None) -> int:
    """Queue again the pending chunks of scans whose checksum phase made no progress for ``HEAD_STALLED``.

    A chunk's message can be lost (a broker restart without persistence, a worker killed between the
    apply and the queueing). A chunk still waiting behind a long queue may be sent twice; the second
    delivery finds it done and writes nothing.
    """
    now = now or timezone.now()
    cutoff = now - HEAD_STALLED
    stalled = []
    pending = (
        Inventory.objects.filter(head_chunks__state=HeadChunkState.PENDING, finished_at__lt=cutoff)
        .order_by()
        .values_list("pk", flat=True)
        .distinct()
    )
    for inventory_id in pending:
        last = (
            HeadChunk.objects.filter(inventory_id=inventory_id, finished_at__isnull=False)
            .order_by("-finished_at")
            .values_list("finished_at", flat=True)
            .first()
        )
        if last is None or last < cutoff:
            stalled.append(inventory_id)
    return sum(head_chunks_queue(inventory_id) for inventory_id in stalled)


def head_backoff(retries: int) -> float:
    """Seconds before a chunk's next attempt: exponential, capped, with full jitter (many chunks retry at once)."""
    return random.uniform(HEAD_BACKOFF / 2, min(HEAD_BACKOFF_MAX, HEAD_BACKOFF * 2**retries))


def head_chunk_run(chunk_id: int, *, final: bool = True, worker: str = "") -> str:
    """HEAD one chunk's objects, write what the store says and verify their checkpoints again. Idempotent.

    Raises ``ChunkRetry`` when the store may answer later and this is not the ``final`` attempt; on
    the final one the chunk is given up (marked failed, its objects left unverified, the reason kept).
    An object refused for good (AccessDenied) is counted as failed and the others are written. An
    object gone or rewritten since it was listed (the conditional HEAD says so, or the shard file now
    carries another ETag) is left alone: the scan that sees the new content fetches its checksum.
    """
    chunk = HeadChunk.objects.filter(pk=chunk_id).first()
    if chunk is None or chunk.state != HeadChunkState.PENDING:
        return "skipped"
    HeadChunk.objects.filter(pk=chunk.pk).update(attempts=F("attempts") + 1)
    attempts = chunk.attempts + 1
    started = time.monotonic()
    bucket = Bucket.objects.filter(location_id=chunk.location_id).first()
    if bucket is None:
        return _chunk_end(chunk, {}, gave_up=True, error="the location has no bucket settings any more", worker=worker)
    try:
        answers, failed, error = _head_items(bucket, chunk.items)
    except s3.S3Error as exc:
        if exc.transient and not final:
            raise ChunkRetry(exc) from None
        why = f"given up after {attempts} attempts" if exc.transient else "not retried: it would fail the same way"
        return _chunk_end(chunk, {}, gave_up=True, error=f"{exc.message}; {why}", worker=worker)
    state = _chunk_end(chunk, answers, gave_up=False, failed=failed, error=error, worker=worker)
    log.info(
        "HEAD chunk %s (scan %s, %s objects, attempt %s): %s in %.2f s",
        chunk.seq,
        chunk.inventory_id,
        chunk.size,
        attempts,
        state,
        time.monotonic() - started,
    )
    return state


def _head_items(bucket: Bucket, items: list[list[str]]) -> tuple[dict[str, s3.HeadInfo], int, str]:
    """HEAD every ``[path, ETag]`` by ``HEAD_THREADS`` threads: (answers by path, objects refused, first refusal).

    A transient failure of any object raises (the chunk is retried whole); a refusal is counted.
    """
    client = s3.client_for(bucket)
    prefix = bucket.prefix if not bucket.prefix or bucket.prefix.endswith("/") else bucket.prefix + "/"

    def one(item: list[str]) -> s3.HeadInfo | s3.S3Error | None:
        path, etag = item
        try:
            return s3.head(client, bucket.bucket_name, prefix + path, etag=etag)
        except s3.S3Error as exc:
            if exc.transient:
                raise
            return exc

    answers: dict[str, s3.HeadInfo] = {}
    failed = 0
    first = ""
    pool = ThreadPoolExecutor(max_workers=HEAD_THREADS, thread_name_prefix="s3-head")
    try:
        for (path, _etag), answer in zip(items, pool.map(one, items), strict=True):
            if isinstance(answer, s3.S3Error):
                failed += 1
                first = first or answer.message
            elif answer is not None:
                answers[path] = answer
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return answers, failed, first


def _chunk_end(
    chunk: HeadChunk,
    answers: dict[str, s3.HeadInfo],
    *,
    gave_up: bool,
    failed: int = 0,
    error: str = "",
    worker: str = "",
) -> str:
    """Write one chunk's answers, verify its checkpoints again and count it, in one transaction."""
    from catalog.models import CheckpointCopy
    from catalog.verification import checkpoints_verify

    state = HeadChunkState.FAILED if gave_up else HeadChunkState.DONE
    failed = chunk.size if gave_up else failed
    fields = ["checksum", "checksum_algo", "version_id", "legal_hold", "retain_until", "digests"]
    with transaction.atomic():
        # The ingest's lock: a scan or inventory applying at this location waits, and is waited for.
        location = StorageLocation.objects.select_for_update().filter(pk=chunk.location_id).first()
        now = timezone.now()
        took = HeadChunk.objects.filter(pk=chunk.pk, state=HeadChunkState.PENDING).update(
            state=state,
            finished_at=now,
            failed=failed,
            error=error[:2000],
            done_by=worker[:200],
            # The keys are only worth keeping while something of the chunk is unresolved.
            items=chunk.items if failed else [],
        )
        if not took or location is None:
            return "skipped"  # another delivery finished it first
        listed = {path: etag for path, etag in chunk.items if path in answers}
        changed = []
        for path_batch in _batches(list(listed), 1000):
            for row in ShardFile.objects.filter(
                location_id=chunk.location_id, path__in=path_batch, gone_at__isnull=True
            ).only("pk", "path", "etag", "copy_id", *fields):
                if row.etag != listed[row.path]:
                    continue  # rewritten since it was listed: the next scan fetches for the new content
                info = answers[row.path]
                values = {
                    "checksum": info.checksum or row.checksum,
                    "checksum_algo": info.checksum_algo if info.checksum else row.checksum_algo,
                    "version_id": (info.version_id or row.version_id)[:1024],
                    "legal_hold": info.legal_hold if chunk.write_lock_state else row.legal_hold,
                    "retain_until": info.retain_until if chunk.write_lock_state else row.retain_until,
                    # What the store says now, the time of this HEAD included (a recheck refreshes it).
                    "digests": info.digests or row.digests,
                }
                if any(getattr(row, k) != v for k, v in values.items()):
                    for k, v in values.items():
                        setattr(row, k, v)
                    changed.append(row)
        for row in changed:
            row.digests = _json_text(row.digests)
        ShardFile.objects.bulk_update(changed, fields, batch_size=1000)
        copy_ids = {row.copy_id for row in changed if row.copy_id}
        copies = 0
        if copy_ids:
            checkpoints = set(CheckpointCopy.objects.filter(pk__in=copy_ids).values_list("checkpoint_id", flat=True))
            copies = checkpoints_verify(checkpoints)
        HeadChunk.objects.filter(pk=chunk.pk).update(written=len(changed), copies=copies)
        Inventory.objects.filter(pk=chunk.inventory_id).update(
            checksums_done=F("checksums_done") + chunk.size, checksums_failed=F("checksums_failed") + failed
        )
        if not HeadChunk.objects.filter(inventory_id=chunk.inventory_id, state=HeadChunkState.PENDING).exists():
            _checksums_finished(chunk.inventory_id, location, now)
    return state


def _json_text(digests: dict | None) -> Any:
    """Digests written as the canonical text the ingest stages (``catalog.digests.dumps``): on SQLite the
    merge compares the stored text, which must not differ from an unchanged object's staged text."""
    text = digests_dumps(digests)
    if text is None:
        return RawSQL("NULL", ())
    cast = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
    return RawSQL(cast, (text,))  # noqa: S611 - the text is a parameter


def _same_digests(a: dict | None, b: dict | None) -> bool:
    """The same checksums, whenever they were HEADed."""
    return {k: v for k, v in (a or {}).items() if k != "at"} == {k: v for k, v in (b or {}).items() if k != "at"}


def recheck_due(bucket: Bucket, now: datetime) -> bool:
    """Whether a scan of this bucket now is a recheck: every object HEADed again (``Bucket.recheck_days``).

    Only where checksums are fetched at all; the first scan of a bucket (or the first since this
    setting came) is one, which for a new bucket is no more than it would HEAD anyway.
    """
    if not bucket.fetch_checksums or not bucket.recheck_days:
        return False
    return bucket.rechecked_at is None or bucket.rechecked_at <= now - timedelta(days=bucket.recheck_days)


def _batches(values: list, size: int) -> Iterator[list]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


def _checksums_finished(inventory_id: int, location: StorageLocation, now: datetime) -> None:
    """The last chunk of a scan is in: record when, say what failed, and roll usage up again if verdicts moved."""
    sums = HeadChunk.objects.filter(inventory_id=inventory_id).aggregate(
        copies=Sum("copies"), failed=Sum("failed"), written=Sum("written"), attempts=Sum("attempts")
    )
    if sums["copies"]:
        from spend.usage import usage_refresh

        # Verification may have found a copy corrupt: today's usage states follow it.
        usage_refresh(location=location, day=now.astimezone(UTC).date(), now=now)
    inventory = Inventory.objects.only("pk", "error", "checksums_total", "finished_at").get(pk=inventory_id)
    error = inventory.error
    failed = sums["failed"] or 0
    if failed:
        reason = (
            HeadChunk.objects.filter(inventory_id=inventory_id, failed__gt=0)
            .exclude(error="")
            .order_by("seq")
            .values_list("error", flat=True)
            .first()
        )
        note = (
            f"warning: stored checksums could not be fetched for {failed:,} of {inventory.checksums_total:,} "
            f"object(s), which stay unverified until they change: {reason or 'no reason given'}"
        )
        error = f"{error}\n{note}" if error else note
    Inventory.objects.filter(pk=inventory_id).update(checksums_finished_at=now, error=error[:4000])
    log.info(
        "scan %s stored: %s HEAD requests after the snapshot, %s files updated, %s copies re-verified, in %.2f s "
        "(%s chunk attempts, %s objects failed)",
        inventory_id,
        inventory.checksums_total,
        sums["written"] or 0,
        sums["copies"] or 0,
        (now - inventory.finished_at).total_seconds() if inventory.finished_at else 0.0,
        sums["attempts"] or 0,
        failed,
    )


def _report_time(value: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = parse_datetime(value)
    except ValueError:
        return None
    if parsed is None:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
