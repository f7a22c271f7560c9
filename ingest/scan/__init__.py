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

The modules, from the bottom: ``buckets`` (registering a bucket, its settings), ``start`` (starting scans,
on demand and on schedule), ``notes`` (a scan's warnings), ``listing`` and ``report`` (where the objects come
from), ``fetch`` (their ranged GETs and HEADs), ``objects`` (what each object becomes), ``prejudge`` and
``first_apply`` (a first listing recognised while it goes on, and its apply), ``apply`` (uploads and versions),
``head_plan`` and ``head_chunks`` (the checksum phase), ``scanner`` (one run of one scan, ``Scanner``) and ``run``
(``scan_run``, the task's entry). The scanner uses only the public names of ``ingest.inventory``'s modules.

This package re-exports the public names other apps use; its own modules import from the defining module.
"""

from ingest.scan.buckets import MAX_RECHECK_DAYS, bucket_add, bucket_set
from ingest.scan.head_chunks import HEAD_RETRIES, ChunkRetry, head_backoff, head_chunk_run
from ingest.scan.head_plan import HEAD_CHUNK, head_chunks_queue, head_chunks_resend, recheck_due
from ingest.scan.listing import LISTING_THREADS
from ingest.scan.run import scan_run
from ingest.scan.start import SCANNER, scan_due, scan_start

__all__ = [
    "HEAD_CHUNK",
    "HEAD_RETRIES",
    "LISTING_THREADS",
    "MAX_RECHECK_DAYS",
    "SCANNER",
    "ChunkRetry",
    "bucket_add",
    "bucket_set",
    "head_backoff",
    "head_chunk_run",
    "head_chunks_queue",
    "head_chunks_resend",
    "recheck_due",
    "scan_due",
    "scan_run",
    "scan_start",
]
