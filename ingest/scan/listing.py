"""Listing a bucket below its prefix: one sequence of pages, or (a big bucket with several top-level
prefixes) each prefix listed by a pool of threads; and its non-current versions."""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fleet import s3
from ingest.scan.notes import Notes

LISTING_THREADS = 8
PARALLEL_MIN_PREFIXES = 2  # top-level prefixes in the probe that make a big bucket worth listing in parallel


def listing_pages(client: Any, name: str, prefix: str) -> Iterator[list[s3.ObjectInfo]]:
    """The objects below ``prefix``, a page at a time: split by top-level prefix when the bucket is big.

    At the bucket's root the trash of soft deletions (``s3.TRASH_PREFIX``) is left out: what is there
    was deleted, and is shown as pending reclaim by the deletions, not as files of the location.
    """
    for page in _listing_pages(client, name, prefix):
        if not prefix.startswith(s3.TRASH_PREFIX):
            page = [o for o in page if not o.key.startswith(s3.TRASH_PREFIX)]
        if page:
            yield page


def _listing_pages(client: Any, name: str, prefix: str) -> Iterator[list[s3.ObjectInfo]]:
    pages = s3.list_pages(client, name, prefix)
    first = next(pages, None)
    if first is None:
        return
    if first.truncated:
        # More than a page: worth one more request to see whether the listing can be split.
        top = s3.list_pages(client, name, prefix, delimiter="/")
        probe = next(top, None)
        if probe is not None and len(probe.prefixes) >= PARALLEL_MIN_PREFIXES:
            pages.close()
            yield from parallel_pages(client, name, probe, top)
            return
        top.close()
    yield first.objects
    for page in pages:
        yield page.objects


def parallel_pages(client: Any, name: str, probe: s3.Page, top: Iterator[s3.Page]) -> Iterator[list[s3.ObjectInfo]]:
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
            for page in s3.list_pages(client, name, prefix):
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


def noncurrent_versions(client: Any, name: str, prefix: str, notes: Notes) -> list[s3.VersionInfo] | None:
    """The bucket's non-current versions below the prefix; None when the store refuses to list them."""
    found: list[s3.VersionInfo] = []
    try:
        for page in s3.noncurrent_versions(client, name, prefix):
            found.extend(v for v in page if not (v.key.endswith("/") and v.size == 0))
    except s3.S3Error as exc:
        if exc.code in s3.UNSUPPORTED_CODES:
            notes.other.append(f"non-current versions could not be listed ({exc.message}); the last known are kept")
            return None
        raise
    return found
