"""Recognising a location's first listing run directory by run directory while the listing goes on."""

from __future__ import annotations

import array
import json
import logging
import queue
import threading

from catalog.formats.base import FileEntry
from catalog.layout import PathTemplate
from catalog.recognition import recognize
from fleet.models import (
    StorageLocation,
)
from ingest.inventory.rows import Row

log = logging.getLogger(__name__)

# Files of a first scan recognised while the listing goes on, kept (with their verdicts) until the apply;
# the run directories beyond this are recognised at the apply, from the staged rows. Bounds the memory.
PREJUDGE_MAX_FILES = 250_000


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


class PreJudge:
    """Recognition of a location's first listing, run directory by run directory, while the listing goes on.

    A listing returns keys in order within each top-level prefix (the parallel listing splits by those),
    so a run directory is complete once its prefix's listing has passed the end of its range (the same
    rule as ``ingest.inventory``'s one-pass ingest of a sorted upload). Each complete directory's files are
    recognised (``catalog.recognition.recognize``: pure Python, no database) by a thread of its own and
    kept with the verdict, so that the apply, still one transaction after the whole listing, only writes
    (``apply_first``). The entries are what the apply would read back from the staged rows. A listing
    out of order, or a location that has shard files by the time of the apply, leaves everything to
    ``apply_staged``; run directories beyond ``PREJUDGE_MAX_FILES`` files are recognised at the apply.
    """

    def __init__(self, location: StorageLocation) -> None:

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
    def start(cls, location: StorageLocation) -> PreJudge | None:
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
