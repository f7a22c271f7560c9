"""The store's side of a listing's objects: the ranged GETs that read a manifest's facts and, in an Object Lock
bucket listed without its lock state, a HEAD of each object. Run in pool threads: no database here."""

from __future__ import annotations

import threading
from typing import Any

from fleet import s3
from fleet.agent import facts_kind, stream_facts
from ingest.scan.notes import Notes

WHOLE_KINDS = frozenset({"dcp_metadata", "hf_index", "trainer_state", "json"})  # facts read from the whole file


class Fetcher:
    """Reads objects of one bucket below a prefix for ``objects.ObjectRows``, counting its requests."""

    def __init__(self, client: Any, bucket_name: str, prefix: str, notes: Notes) -> None:
        self.client = client
        self.bucket_name = bucket_name
        self.prefix = prefix
        self.notes = notes
        self.gets = 0
        self.heads = 0
        self._count_lock = threading.Lock()

    def fetch(
        self, path: str, obj: s3.ObjectInfo, *, head: bool, read_facts: bool
    ) -> tuple[s3.HeadInfo | None, dict | None]:
        """HEAD (``head``) and/or read the facts (``read_facts``) of one object (in a pool thread: no database here)."""
        info = self.head((0, path, obj.etag)) if head else None
        if not read_facts:
            return info, None
        name = path.rsplit("/", 1)[-1]
        # Manifests that are parsed whole come in one GET; shards only by their header and tail.
        whole = facts_kind(name) in WHOLE_KINDS and obj.size <= s3.MAX_SMALL_OBJECT
        reader = s3.RangedReader(
            self.client,
            self.bucket_name,
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

    def head(self, item: tuple[int, str, str]) -> s3.HeadInfo | None:
        """HEAD one object while listing an Object Lock bucket (in a pool thread: no database here)."""
        _pk, path, etag = item
        with self._count_lock:
            self.heads += 1
        try:
            return s3.head(self.client, self.bucket_name, self.prefix + path, etag=etag)
        except s3.S3Error as exc:
            if exc.transient:
                raise
            self.notes.head_failed(exc)
            return None
