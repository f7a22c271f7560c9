"""The checksum cache (SQLite, keyed by device, inode, size and mtime_ns), scrubbing (re-reading the files
checksummed longest ago), and the checksums of one listed file: from the cache, or read once and checked."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import struct
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .checksums import FileChecksums, PendingSums, Throttle, checksum_file
from .common import MIB, AgentError, os_reason, printable
from .crc import CRC_ALGORITHMS, CRC_PARAMS, ZipMember, zip_members
from .facts import FactsError, open_regular

if TYPE_CHECKING:
    from .common import Warn


CACHE_FORGET_SECONDS = 90 * 24 * 3600
DEFAULT_CACHE = "~/.cache/ckptfleet-agent/checksums.sqlite3"
DEFAULT_SCRUB_RATE = 200.0  # MiB/s


def _signed64(value: int) -> int:
    # SQLite integers are signed 64-bit; st_dev and st_ino are unsigned on some file systems.
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclasses.dataclass(frozen=True)
class CachedChecksums:
    """A checksum cache row: the sha256, and what newer agents add (None in a row an older agent wrote)."""

    sha256: str
    checksums: dict[str, Any] | None
    members: dict[str, Any] | None  # {} when the zip's directory could not be read, None when not tried
    hashed_at: float | None

    def covers(self, *, zip_check: bool) -> bool:
        """Whether the row holds everything this agent would compute, so the file need not be read."""
        if self.checksums is None or self.hashed_at is None or (zip_check and self.members is None):
            return False
        return all(algo in self.checksums for algo in CRC_ALGORITHMS)


class ScrubPlan:
    """Which files of a root are re-read this run: the oldest-hashed, up to a share of the root's bytes."""

    def __init__(self, oldest: float, budget: int, rate: float) -> None:
        self.oldest = oldest  # files hashed at or before this are due
        self.left = budget
        self.throttle = Throttle(rate)

    def due(self, hashed_at: float | None, size: int) -> bool:
        if self.left <= 0 or hashed_at is None or hashed_at > self.oldest:
            return False
        self.left -= size
        return True


class ChecksumCache:
    """Checksums of file contents in SQLite, keyed by (st_dev, st_ino, size, mtime_ns).

    A row holds the sha256, the JSON of the ``checksums`` object (CRCs), the JSON of a torch zip's
    member check, when the file was read (``hashed_at``), and the root it was seen below with the
    number of the walk of that root that last saw it (``walk``). Rows not
    looked up for 90 days are dropped on close, so the cache follows the files on disk instead of
    growing with every checkpoint ever written. A cache file of an older agent is migrated in place:
    its rows lack the CRCs, so each file is read once more.

    ``scrub_share`` > 0 re-reads, in each root, the files whose checksums are oldest, up to that share
    of the root's bytes (as the root's last complete walk found them), at most ``scrub_rate`` bytes a
    second: bit rot does not change a file's mtime, so a cached checksum otherwise never goes stale.
    A walk of a root begins with ``begin_walk`` and, when it saw every file, ends with ``end_walk``.
    """

    def __init__(self, path: str, *, scrub_share: float = 0.0, scrub_rate: float = DEFAULT_SCRUB_RATE * MIB) -> None:
        self.path = os.path.expanduser(path)
        self.scrub_share = scrub_share
        self.scrub_rate = scrub_rate
        self._seen: list[tuple[str | None, tuple[int, ...]]] = []
        self._walks: dict[str, int] = {}  # the number of the walk under way, by root
        try:
            parent = os.path.dirname(self.path)
            if parent:
                os.makedirs(parent, mode=0o700, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=60)
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS checksums (dev INTEGER NOT NULL, ino INTEGER NOT NULL, "
                "size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL, "
                "last_seen INTEGER NOT NULL, checksums TEXT, members TEXT, hashed_at REAL, root TEXT, walk INTEGER, "
                "PRIMARY KEY (dev, ino, size, mtime_ns)) WITHOUT ROWID"
            )
            have = {row[1] for row in self._db.execute("PRAGMA table_info(checksums)")}
            new_columns = {
                "checksums": "TEXT",
                "members": "TEXT",
                "hashed_at": "REAL",
                "root": "TEXT",
                "walk": "INTEGER",
            }
            for column, kind in new_columns.items():
                if column not in have:  # a cache written by an agent before CRCs
                    self._db.execute(f"ALTER TABLE checksums ADD COLUMN {column} {kind}")
            # The number of each root's last complete walk: rows of that root seen by none since are gone files.
            self._db.execute("CREATE TABLE IF NOT EXISTS roots (root TEXT PRIMARY KEY, walk INTEGER NOT NULL)")
            self._db.commit()
        except (OSError, sqlite3.Error) as exc:
            raise AgentError(f"cannot use checksum cache {printable(self.path)}: {exc}", fatal=True) from None

    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, int, int, int]:
        return (_signed64(st.st_dev), _signed64(st.st_ino), st.st_size, st.st_mtime_ns)

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            # A locked or full cache is not worth silently re-hashing petabytes: stop and say so.
            raise AgentError(f"checksum cache {printable(self.path)}: {exc}", fatal=True) from None

    def get(self, st: os.stat_result, *, root: str | None = None) -> CachedChecksums | None:
        key = self._key(st)
        with self._failing():
            row = self._db.execute(
                "SELECT sha256, checksums, members, hashed_at FROM checksums "
                "WHERE dev = ? AND ino = ? AND size = ? AND mtime_ns = ?",
                key,
            ).fetchone()
        if row is None:
            return None
        self._seen.append((root, key))
        if len(self._seen) >= 10_000:
            self._flush_seen()
        return CachedChecksums(row[0], _json_or_none(row[1]), _json_or_none(row[2]), row[3])

    def put(self, st: os.stat_result, sums: FileChecksums, *, root: str | None = None) -> None:
        members = None if sums.members is None else json.dumps(sums.members)
        with self._failing():
            self._db.execute(
                "INSERT OR REPLACE INTO checksums (dev, ino, size, mtime_ns, sha256, last_seen, checksums, members, "
                "hashed_at, root, walk) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *self._key(st),
                    sums.sha256,
                    int(time.time()),
                    json.dumps(sums.checksums),
                    members,
                    sums.at,
                    root,
                    self._walks.get(root or ""),
                ),
            )
            # Committed at once: hashing a shard takes seconds, and an interrupted run keeps its work.
            self._db.commit()

    def begin_walk(self, root: str) -> ScrubPlan | None:
        """Start a walk of ``root``; return which of its files to re-read, or None when not scrubbing."""
        with self._failing():
            row = self._db.execute("SELECT walk FROM roots WHERE root = ?", (root,)).fetchone()
        last = row[0] if row else None
        self._walks[root] = (last or 0) + 1
        if self.scrub_share <= 0 or last is None:
            return None  # on a root's first walk every file is read anyway
        with self._failing():
            # The root's files as its last complete walk saw them (or an interrupted one since).
            (total,) = self._db.execute(
                "SELECT SUM(size) FROM checksums WHERE root = ? AND walk >= ? AND checksums IS NOT NULL "
                "AND hashed_at IS NOT NULL",
                (root, last),
            ).fetchone()
            budget = int((total or 0) * min(self.scrub_share, 1.0))
            oldest, acc = None, 0
            for size, hashed_at in self._db.execute(
                "SELECT size, hashed_at FROM checksums WHERE root = ? AND walk >= ? AND checksums IS NOT NULL "
                "AND hashed_at IS NOT NULL ORDER BY hashed_at",
                (root, last),
            ):
                oldest, acc = hashed_at, acc + size
                if acc >= budget:
                    break
        if oldest is None or budget <= 0:
            return None
        return ScrubPlan(oldest, budget, self.scrub_rate)

    def end_walk(self, root: str) -> None:
        """Record that the walk of ``root`` under way saw every file below it."""
        self._flush_seen()
        with self._failing():
            self._db.execute(
                "INSERT OR REPLACE INTO roots (root, walk) VALUES (?, ?)", (root, self._walks.pop(root, 1))
            )
            self._db.commit()

    def _flush_seen(self) -> None:
        now = int(time.time())
        with self._failing():
            self._db.executemany(
                "UPDATE checksums SET last_seen = ?, root = COALESCE(?, root), walk = COALESCE(?, walk) "
                "WHERE dev = ? AND ino = ? AND size = ? AND mtime_ns = ?",
                [(now, root, self._walks.get(root or ""), *key) for root, key in self._seen],
            )
            self._db.commit()
        self._seen.clear()

    def close(self) -> None:
        try:
            self._flush_seen()
            with self._failing():
                forget_before = int(time.time()) - CACHE_FORGET_SECONDS
                self._db.execute("DELETE FROM checksums WHERE last_seen < ?", (forget_before,))
                self._db.commit()
        finally:
            self._db.close()

    def __enter__(self) -> ChecksumCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _json_or_none(text: str | None) -> Any:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None  # a damaged row is as good as none: the file is read again
    return value if isinstance(value, dict) else None


def checksums_of(
    path: str,
    st: os.stat_result,
    cache: ChecksumCache | None,
    warn: Warn,
    *,
    zip_check: bool = False,
    root: str | None = None,
    scrub: ScrubPlan | None = None,
    later: bool = False,
) -> FileChecksums | PendingChecksums | None:
    """The checksums of the file at ``path`` as listed (``st``): from the cache when it holds them all
    (unless the file is due for a scrub), else read once. None when it cannot be read or changed meanwhile.

    With ``later``, a small file's CRCs may still be under way when it has been read: then a
    ``PendingChecksums`` is returned, whose ``finish`` does the rest once they are done."""
    cached = cache.get(st, root=root) if cache is not None else None
    usable = cached is not None and cached.covers(zip_check=zip_check)
    scrubbing = usable and scrub is not None and scrub.due(cached.hashed_at if cached else None, st.st_size)
    if cached is not None and usable and not scrubbing:
        return FileChecksums(cached.sha256, cached.checksums or {}, cached.members, cached.hashed_at or 0.0)
    try:
        with open_regular(path) as f:
            before = os.fstat(f.fileno())
            members = None
            if zip_check:
                try:
                    members = zip_members(f, before.st_size)
                except (struct.error, ValueError, OverflowError):
                    members = None
                f.seek(0)
            throttle = scrub.throttle if scrub and scrubbing else None
            sums = checksum_file(f, st.st_size, members=members, throttle=throttle, later=later)
            after = os.fstat(f.fileno())
    except (OSError, FactsError) as exc:
        warn(f"{printable(path)}: no checksum sent: {os_reason(exc)}")
        return None
    if isinstance(sums, PendingSums):
        return PendingChecksums(sums, (path, st, cache, cached, before, after, zip_check, members, root))
    return _checked(sums, path, st, cache, cached, before, after, zip_check, members, root, warn)


class PendingChecksums:
    """``checksums_of`` of a file read whose CRCs are under way: ``finish`` waits for them and does the rest
    (the change check, the warnings, the cache), as ``checksums_of`` would have."""

    __slots__ = ("context", "sums")

    def __init__(self, sums: PendingSums, context: tuple[Any, ...]) -> None:
        self.sums = sums
        self.context = context  # the arguments of _checked but the first and the last

    def ready(self) -> bool:
        return self.sums.ready()

    def finish(self, warn: Warn) -> FileChecksums | None:
        try:
            sums = self.sums.result()
        except (OSError, FactsError) as exc:  # as checksum_file's would be in checksums_of
            warn(f"{printable(self.context[0])}: no checksum sent: {os_reason(exc)}")
            return None
        # context holds exactly the nine arguments between the first and the last, which mypy cannot count.
        return _checked(sums, *self.context, warn)  # type: ignore[call-arg]


def _checked(
    sums: FileChecksums,
    path: str,
    st: os.stat_result,
    cache: ChecksumCache | None,
    cached: CachedChecksums | None,
    before: os.stat_result,
    after: os.stat_result,
    zip_check: bool,
    members: list[ZipMember] | None,
    root: str | None,
    warn: Warn,
) -> FileChecksums | None:
    """The end of ``checksums_of``, once the file was read (``before`` and ``after`` it) and its checksums are done."""
    listed = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if any((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) != listed for s in (before, after)):
        warn(f"{printable(path)}: no checksum sent: the file changed while it was read")
        return None
    if zip_check and members is None:
        sums = dataclasses.replace(sums, members={})  # tried: the central directory cannot be read
    if cached is not None and _content_differs(cached, sums):
        warn(
            f"{printable(path)}: content changed without a new mtime: bit rot or an in-place write "
            f"(sha256 was {cached.sha256}, is {sums.sha256}); the new checksums are sent"
        )
    if cache is not None:
        cache.put(st, sums, root=root)
    return sums


def _content_differs(cached: CachedChecksums, sums: FileChecksums) -> bool:
    if cached.sha256 != sums.sha256:
        return True
    old = cached.checksums or {}
    return any(old.get(algo) not in (None, sums.checksums.get(algo)) for algo in CRC_PARAMS)
