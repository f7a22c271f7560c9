"""Anchors: the audit chain's head written outside the database, where whoever can rewrite the database cannot.

An anchor is a small signed JSON document: how many events the chain had, the hash of the newest, when, and an
HMAC-SHA256 under the audit key (named by its id). The verifier (audit.verify) reads every anchor back from where
it was written and checks that the database still has that event with that hash at that position: an event
deleted, or rewritten and re-hashed (with the key or without it), no longer matches an anchor written after it.

Where anchors go is a *store*. This module has the one that needs nothing but a directory: a JSON-lines file per
month, appended to, never rewritten. The S3 store, with Object Lock COMPLIANCE retention, lives with the S3 client
in fleet (fleet/audit_anchors.py) and registers itself here at start (``register_store``), since audit is the
lowest floor and imports none above it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from audit.choices import AnchorOutcome, AnchorTarget
from audit.models import AuditAnchor, AuditChainHead
from audit.services import GENESIS, UnknownAuditKey, audit_key

log = logging.getLogger(__name__)

SCHEMA = "ckptfleet-audit-anchor/1"
SIGNED_FIELDS = ("schema", "count", "last_hash", "at", "key_id")
MAX_LINE = 4096  # an anchor is about 300 bytes; a longer line is not one of ours


class BadAnchor(Exception):
    """An anchor that cannot be trusted: not one of ours, altered, or signed with a key we do not hold."""


@dataclass(frozen=True)
class Anchor:
    """An anchor read back (or about to be written): the chain had ``count`` events, the newest hashed ``last_hash``."""

    count: int
    last_hash: str
    at: datetime
    key_id: str
    location: str = ""

    def describe(self) -> str:
        return f"anchor of {timezone.localtime(self.at):%Y-%m-%d %H:%M %Z}"


def _signature(doc: dict[str, Any], key_id: str) -> str:
    body = json.dumps({name: doc[name] for name in SIGNED_FIELDS}, sort_keys=True, separators=(",", ":"))
    return hmac.new(audit_key(key_id), f"ckptfleet audit anchor\n{body}".encode(), hashlib.sha256).hexdigest()


def anchor_document(count: int, last_hash: str, at: datetime) -> dict[str, Any]:
    """The signed document of an anchor, under the current audit key."""
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "count": count,
        "last_hash": last_hash,
        "at": at.isoformat(),
        "key_id": settings.AUDIT_KEY_ID,
    }
    doc["signature"] = _signature(doc, settings.AUDIT_KEY_ID)
    return doc


def encode(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def read_anchor(raw: bytes | str, location: str) -> Anchor:
    """Parse and check one anchor; raises BadAnchor saying why, never with a key in the message."""
    try:
        doc = json.loads(raw)
    except ValueError:
        raise BadAnchor(f"{location} is not JSON") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise BadAnchor(f"{location} is not an audit anchor ({SCHEMA})")
    count, last_hash, at, key_id = doc.get("count"), doc.get("last_hash"), doc.get("at"), doc.get("key_id")
    when = parse_datetime(at) if isinstance(at, str) else None
    if (
        isinstance(count, bool)
        or not isinstance(count, int)
        or count < 0
        or not isinstance(last_hash, str)
        or len(last_hash) != 64
        or when is None
        or not isinstance(key_id, str)
    ):
        raise BadAnchor(f"{location} is missing or has malformed fields")
    try:
        expected = _signature(doc, key_id)
    except UnknownAuditKey:
        raise BadAnchor(
            f"{location} is signed with audit key {key_id!r}, which is neither the current key nor in the keyring"
        ) from None
    if not isinstance(doc.get("signature"), str) or not hmac.compare_digest(doc["signature"], expected):
        raise BadAnchor(f"{location} has a signature that does not match its content (forged or altered)")
    return Anchor(count=count, last_hash=last_hash, at=when, key_id=key_id, location=location)


class AnchorStore(Protocol):
    """Somewhere outside the database that keeps anchors."""

    target: str  # an AnchorTarget

    def write(self, doc: dict[str, Any], at: datetime) -> tuple[str, datetime | None]:
        """Store the anchor; return where (for the record and for people) and until when it is retained, if known."""
        ...

    def read_all(self) -> Iterator[tuple[str, bytes]]:
        """Every anchor stored, as (location, raw document)."""
        ...

    def describe(self) -> str: ...

    def holds(self, location: str) -> bool:
        """Whether a recorded location is in this store (a store moved elsewhere is not asked for its old anchors)."""
        ...


class FileAnchorStore:
    """Anchors as JSON lines in ``<dir>/audit-anchors-YYYY-MM.jsonl``, appended and flushed to disk, never rewritten.

    Put the directory where the database's users cannot write (another host's mount, a WORM share), or copy the
    files off; the signature makes a forged line fail, and the verifier notices a line that went missing."""

    target = AnchorTarget.FILE

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def describe(self) -> str:
        return f"directory {self.directory}"

    def holds(self, location: str) -> bool:
        return Path(location).parent == self.directory

    def write(self, doc: dict[str, Any], at: datetime) -> tuple[str, datetime | None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"audit-anchors-{at:%Y-%m}.jsonl"
        line = encode(doc) + b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        return str(path), None

    def read_all(self) -> Iterator[tuple[str, bytes]]:
        if not self.directory.is_dir():
            return
        for path in sorted(self.directory.glob("audit-anchors-*.jsonl")):
            with path.open("rb") as f:
                for number, line in enumerate(f, 1):
                    if line.strip():
                        yield f"{path}:{number}", line[:MAX_LINE]


def _file_store() -> AnchorStore | None:
    return FileAnchorStore(Path(settings.AUDIT_ANCHOR_DIR)) if settings.AUDIT_ANCHOR_DIR else None


_STORES: dict[str, Callable[[], AnchorStore | None]] = {AnchorTarget.FILE: _file_store}


def register_store(target: str, make: Callable[[], AnchorStore | None]) -> None:
    """Add a kind of store: ``make()`` returns it when settings configure it, else None (fleet adds S3 at start)."""
    _STORES[target] = make


def configured_stores() -> list[AnchorStore]:
    stores = [make() for make in _STORES.values()]
    return [store for store in stores if store is not None]


def anchor_write(*, stores: list[AnchorStore] | None = None) -> list[AuditAnchor]:
    """Write the chain head to every configured store and record each attempt; a failed store does not stop the rest.

    The head is read without a lock: it only moves forward, so an anchor of the head as it was a moment ago is true.
    Nothing to anchor (no store, or no event yet) writes nothing."""
    stores = configured_stores() if stores is None else stores
    head = AuditChainHead.objects.filter(pk=1).first()
    count, last_hash = (head.count, head.last_hash) if head else (0, GENESIS)
    if not stores or count == 0:
        return []
    at = timezone.now()
    doc = anchor_document(count, last_hash, at)
    written = []
    for store in stores:
        try:
            location, retain_until = store.write(doc, at)
        except Exception as exc:  # any store failure is recorded and shown; the other stores still get the anchor
            log.warning("audit anchor to %s failed: %s: %s", store.describe(), type(exc).__name__, exc)
            written.append(
                AuditAnchor.objects.create(
                    at=at,
                    target=store.target,
                    location=store.describe()[:1000],
                    count=count,
                    last_hash=last_hash,
                    outcome=AnchorOutcome.FAILED,
                    error=f"{type(exc).__name__}: {exc}"[:2000],
                )
            )
            continue
        written.append(
            AuditAnchor.objects.create(
                at=at,
                target=store.target,
                location=location[:1000],
                count=count,
                last_hash=last_hash,
                outcome=AnchorOutcome.WRITTEN,
                retain_until=retain_until,
            )
        )
    return written
