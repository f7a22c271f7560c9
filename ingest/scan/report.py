"""Reading a bucket's newest S3 Inventory report (CSV) instead of listing it."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import tempfile
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote_plus

from django.utils.dateparse import parse_datetime

from fleet import s3
from fleet.models import (
    Bucket,
)
from ingest.inventory.rows import InventoryError
from ingest.scan.notes import printable

# S3 Inventory report columns this scanner understands; the others are ignored.
_REPORT_REQUIRED = ("Key", "Size")


class ReportReader:
    """The objects below a prefix, as the newest S3 Inventory report of the bucket lists them."""

    def __init__(self, client: Any, bucket: Bucket, prefix: str) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix

    def pages(self) -> tuple[datetime, Iterator[list[s3.ObjectInfo]]]:
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
        return created, self._objects(report_bucket, files, columns)

    def _objects(self, report_bucket: str, files: list[dict], columns: list[str]) -> Iterator[list[s3.ObjectInfo]]:
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
                yield from self._file(spool, key, columns, lock_known)

    def _file(self, spool: Any, key: str, columns: list[str], lock_known: bool) -> Iterator[list[s3.ObjectInfo]]:
        page: list[s3.ObjectInfo] = []
        line = 0
        try:
            text = io.TextIOWrapper(gzip.GzipFile(fileobj=spool, mode="rb"), encoding="utf-8", newline="")
            for line, record in enumerate(csv.reader(text), 1):
                if len(record) != len(columns):
                    raise InventoryError(line, f"{key}: {len(record)} fields but the fileSchema has {len(columns)}")
                obj = self._object(dict(zip(columns, record, strict=True)), lock_known)
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

    def _object(self, rec: dict[str, str], lock_known: bool) -> s3.ObjectInfo | None:
        if rec.get("Bucket") and rec["Bucket"] != self.bucket.bucket_name:
            return None
        if rec.get("IsLatest", "true").lower() != "true" or rec.get("IsDeleteMarker", "false").lower() == "true":
            return None
        key = unquote_plus(rec["Key"])  # the report URL-encodes keys (a space as '+')
        if not key.startswith(self.prefix):
            return None
        if not rec["Size"].isdigit():
            raise ValueError(f"the size of {printable(key)} is not a number")
        modified = _report_time(rec.get("LastModifiedDate", ""))
        if modified is None:
            raise ValueError(f"the LastModifiedDate of {printable(key)} is not a date")
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
