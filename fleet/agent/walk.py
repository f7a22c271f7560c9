"""Walking a root: one ``file`` line per regular file below it, in path order, and the whole inventory (header,
lines, trailer) as NDJSON. With checksums, small files' CRCs are computed while the walk reads on (``Pipeline``)."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import stat
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, cast

from .cache import ChecksumCache, PendingChecksums, ScrubPlan, checksums_of
from .checksums import FileChecksums
from .common import MIB, AgentError, os_reason, printable, stderr_warn
from .contract import AGENT, MAX_LINE_BYTES, MAX_PATH_BYTES, REFUSED_PATH_CHARS, TRASH_DIR, WIRE_FORMAT
from .facts import file_facts

if TYPE_CHECKING:
    from .common import Warn


PIPELINE_FILES = 64  # a walk goes on reading while at most this many lines wait for their CRCs (0: never)
PIPELINE_BYTES = 16 * MIB  # holding at most this many bytes of file content


class _Writer(Protocol):
    def write(self, data: bytes, /) -> object: ...


def check_root(root: str) -> None:
    try:
        root.encode("utf-8")
    except UnicodeEncodeError:
        raise AgentError(f"root {printable(root)} is not valid UTF-8, so no server can match it") from None
    if not os.path.exists(root):
        raise AgentError(f"root {printable(root)} does not exist")
    if not os.path.isdir(root):
        raise AgentError(f"root {printable(root)} is not a directory")


def filesystem_space(root: str) -> dict[str, int]:
    """The size and the free bytes of the file system holding ``root``, for the header; {} when unknown.

    Free is what an unprivileged writer (a training job) can still use: ``f_bavail``, as ``df`` shows
    under "Avail", not ``f_bfree``, which counts the blocks reserved for root too.
    """
    try:
        st = os.statvfs(root)
    except (OSError, AttributeError):  # no statvfs (Windows), or the mount went away mid-walk
        return {}
    size = st.f_blocks * st.f_frsize
    free = min(st.f_bavail * st.f_frsize, size)
    return {"fs_size_bytes": size, "fs_free_bytes": free} if size > 0 else {}


def _refusal_reason(name: str) -> str | None:
    bad = REFUSED_PATH_CHARS.search(name)
    if bad is None:
        return None
    if "\ud800" <= bad.group() <= "\udfff":
        return "its name is not valid UTF-8"
    if bad.group() == "\\":
        return "its name contains a backslash"
    return "its name contains a control character"


def _list_dir(path: str, prefix: str, root: str, warn: Warn) -> list[tuple[str, os.DirEntry, bool]]:
    """One directory's regular files and subdirectories as (relative path, entry, is_dir), in path order.

    Subdirectories sort as ``name/`` so that walking depth-first yields paths in plain string order
    (``a.txt`` before ``a/x``), which is what "sorted by path" means to every reader of the output.
    """
    keyed: list[tuple[str, str, os.DirEntry, bool]] = []
    with os.scandir(path) as it:
        for entry in it:
            if not prefix and entry.name == TRASH_DIR:
                continue  # soft-deleted files wait there for their purge; they are in no inventory
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                if not is_dir and not entry.is_file(follow_symlinks=False):
                    continue  # sockets, FIFOs, devices
            except OSError as exc:
                warn(f"{printable(os.path.join(root, prefix + entry.name))}: skipped: {os_reason(exc)}")
                continue
            rel = prefix + entry.name
            why = _refusal_reason(entry.name)
            if why:
                what = "directory and everything below it" if is_dir else "file"
                warn(f"{printable(os.path.join(root, rel))}: {what} skipped because {why}")
                continue
            keyed.append((entry.name + "/" if is_dir else entry.name, rel, entry, is_dir))
    keyed.sort(key=lambda item: item[0])
    return [(rel, entry, is_dir) for _, rel, entry, is_dir in keyed]


def scan_root(
    root: str, *, checksums: bool = False, cache: ChecksumCache | None = None, warn: Warn | None = None
) -> Iterator[dict[str, Any]]:
    """Yield a ``file`` line (docs/wire-format.md) for every regular file below ``root``, sorted by path.

    Symlinks and special files are skipped, never followed. Entries the server would refuse (names
    that are not UTF-8 or hold control characters or backslashes, paths over 4096 bytes), unreadable
    directories and files that vanish mid-walk are skipped with a message to ``warn`` (stderr by
    default), so that one odd entry does not fail the host's inventory. Memory holds one listing per
    directory level being walked, never the whole tree, and with ``checksums`` the lines of up to
    ``PIPELINE_FILES`` small files read whole (``PIPELINE_BYTES``) while their CRCs are computed on the
    worker thread (``Pipeline``). Raises AgentError if ``root`` is unusable.
    """
    warn = stderr_warn if warn is None else warn
    root = os.path.abspath(root)
    check_root(root)
    try:
        top = _list_dir(root, "", root, warn)
    except OSError as exc:
        raise AgentError(f"cannot read root {printable(root)}: {os_reason(exc)}") from None
    scrub = cache.begin_walk(root) if checksums and cache is not None else None
    # Small files' CRCs are computed while the walk reads on; their lines wait here to leave in order.
    pipe = Pipeline(warn) if checksums and PIPELINE_FILES > 0 else None
    note = warn if pipe is None else pipe.note
    # An explicit stack rather than recursion: trees may nest deeper than Python's recursion limit.
    stack: list[Iterator[tuple[str, os.DirEntry, bool]]] = [iter(top)]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        rel, entry, is_dir = item
        if is_dir:
            try:
                stack.append(iter(_list_dir(entry.path, rel + "/", root, note)))
            except OSError as exc:
                note(
                    f"{printable(entry.path)}: directory skipped, its files are left out of the "
                    f"inventory: {os_reason(exc)}"
                )
            continue
        if pipe is None:
            line = _file_line(entry, rel, checksums=checksums, cache=cache, warn=warn, root=root, scrub=scrub)
            if line is not None:
                # Nothing is left pending without a pipe. The type is a string: 3.8 cannot subscript dict.
                yield cast("dict[str, Any]", line)
            continue
        if pipe.inodes and cache is not None:
            with contextlib.suppress(OSError):  # else _file_line says why
                if pipe.waits_for(entry.stat(follow_symlinks=False)):
                    yield from pipe.lines(every=True)  # its cache row is put first, as in order
        pipe.add(_file_line(entry, rel, checksums=True, cache=cache, warn=note, root=root, scrub=scrub, later=True))
        yield from pipe.lines()
    if pipe is not None:
        yield from pipe.lines(every=True)
    if checksums and cache is not None:
        cache.end_walk(root)


class _PendingLine:
    """A file line whose checksums are under way (see ``Pipeline``); ``finish`` gives the line."""

    __slots__ = ("facts", "inode", "line", "nbytes", "sums", "zip_check")

    def __init__(
        self,
        line: dict[str, Any],
        facts: dict[str, Any] | None,
        zip_check: bool,
        sums: PendingChecksums,
        st: os.stat_result,
    ) -> None:
        self.line, self.facts, self.zip_check, self.sums = line, facts, zip_check, sums
        self.nbytes = st.st_size
        # A second name of the same file must find this one's checksums in the cache, as it would in order.
        self.inode = (st.st_dev, st.st_ino) if st.st_nlink > 1 else None

    def ready(self) -> bool:
        return self.sums.ready()

    def finish(self, warn: Warn) -> dict[str, Any]:
        return _with_checksums(self.line, self.facts, self.zip_check, self.sums.finish(warn))


class Pipeline:
    """The lines of a walk with checksums that wait for their CRCs, kept in path order.

    A small file is read whole and its sha256 taken on the walking thread, its CRCs left to the worker
    thread (``checksum_file(later=True)``), and the walk reads the next files meanwhile instead of
    waiting: so its CRCs cost the other core's time, not the walk's. Each line leaves in its turn once
    its CRCs are done and the rest of ``checksums_of`` has run for it (the change check, the warnings, the
    cache), and the walk's warnings leave between the lines they came between: the output is the
    sequential walk's. At most ``PIPELINE_FILES`` files and ``PIPELINE_BYTES`` of their content wait.
    """

    def __init__(self, warn: Warn) -> None:
        self.warn = warn
        self.queue: collections.deque[dict[str, Any] | _PendingLine | str] = collections.deque()
        self.files = 0  # _PendingLines in the queue
        self.bytes = 0  # their sizes
        self.inodes: dict[tuple[int, int], int] = {}  # of those with more than one name: how many

    def note(self, message: str) -> None:
        """The walk's ``warn``: a warning leaves after the lines found before it."""
        if self.queue:
            self.queue.append(message)
        else:
            self.warn(message)

    def add(self, item: dict[str, Any] | _PendingLine | None) -> None:
        if item is None:
            return
        if isinstance(item, _PendingLine):
            self.files += 1
            self.bytes += item.nbytes
            if item.inode is not None:
                self.inodes[item.inode] = self.inodes.get(item.inode, 0) + 1
        self.queue.append(item)

    def waits_for(self, st: os.stat_result) -> bool:
        """Whether a line in the queue is of the file ``st`` (another name of it)."""
        return st.st_nlink > 1 and (st.st_dev, st.st_ino) in self.inodes

    def lines(self, *, every: bool = False) -> Iterator[dict[str, Any]]:
        """The lines that can leave now, in order (waiting for the first while over the bounds); ``every``: all."""
        queue = self.queue
        while queue:
            head = queue[0]
            if isinstance(head, _PendingLine):
                if not (every or head.ready() or self.files > PIPELINE_FILES or self.bytes > PIPELINE_BYTES):
                    return
                queue.popleft()
                self.files -= 1
                self.bytes -= head.nbytes
                if head.inode is not None:
                    left = self.inodes.pop(head.inode) - 1
                    if left:
                        self.inodes[head.inode] = left
                yield head.finish(self.warn)
            elif isinstance(head, str):
                queue.popleft()
                self.warn(head)
            else:
                queue.popleft()
                yield head


def _file_line(
    entry: os.DirEntry,
    rel: str,
    *,
    checksums: bool,
    cache: ChecksumCache | None,
    warn: Warn,
    root: str | None = None,
    scrub: ScrubPlan | None = None,
    later: bool = False,
) -> dict[str, Any] | _PendingLine | None:
    if len(rel.encode("utf-8")) > MAX_PATH_BYTES:
        warn(f"{printable(entry.path)}: skipped because its path is longer than {MAX_PATH_BYTES} bytes")
        return None
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError as exc:
        warn(f"{printable(entry.path)}: skipped: {os_reason(exc)}")
        return None
    if not stat.S_ISREG(st.st_mode):
        return None  # replaced by something else since the directory was listed
    line: dict[str, Any] = {"type": "file", "path": rel, "size": st.st_size, "mtime": st.st_mtime_ns / 1e9}
    facts = file_facts(entry.path)
    if not checksums:
        return _with_checksums(line, facts, False, None)
    zip_check = facts is not None and facts.get("kind") == "torch_file" and facts.get("container") == "zip"
    sums = checksums_of(entry.path, st, cache, warn, zip_check=zip_check, root=root, scrub=scrub, later=later)
    if isinstance(sums, PendingChecksums):
        return _PendingLine(line, facts, zip_check, sums, st)
    return _with_checksums(line, facts, zip_check, sums)


def _with_checksums(
    line: dict[str, Any], facts: dict[str, Any] | None, zip_check: bool, sums: FileChecksums | None
) -> dict[str, Any]:
    if sums is not None:
        line["sha256"] = sums.sha256
        line["checksums"] = sums.checksums
        line["checksummed_at"] = sums.at
        if zip_check and facts is not None and sums.members:
            facts = {**facts, "members_checked": sums.members["checked"], "members_bad": sums.members["bad"]}
    if facts is not None:
        line["facts"] = facts
    return line


def inventory_lines(
    root: str,
    host: str,
    *,
    checksums: bool = False,
    cache: ChecksumCache | None = None,
    warn: Warn | None = None,
    started_at: str | None = None,
    allow_empty: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield one whole inventory of ``root``: the header, every file line, then the ``end`` trailer.

    ``allow_empty`` tells the server that an empty root is really empty: without it the server
    refuses an empty inventory for a root that had files, since that is what an unmounted file
    system looks like, and it would otherwise mark every file gone.
    """
    root = os.path.abspath(root)
    check_root(root)
    header: dict[str, Any] = {
        "type": "header",
        "format": WIRE_FORMAT,
        "host": host,
        "root": root,
        "agent": AGENT,
        "started_at": started_at or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if allow_empty:
        header["allow_empty"] = True
    header.update(filesystem_space(root))
    yield header
    files = 0
    total = 0
    for line in scan_root(root, checksums=checksums, cache=cache, warn=warn):
        files += 1
        total += line["size"]
        yield line
    yield {"type": "end", "files": files, "bytes": total}


def encode_line(line: dict[str, Any]) -> bytes:
    """One NDJSON line, UTF-8, newline included.

    Facts that would push the line over the server's line limit, or that hold text which is not
    valid Unicode (a lone surrogate escaped in a JSON manifest or pickled in DCP metadata), are
    replaced by an error fact: one odd manifest is reported as unreadable instead of failing the
    whole inventory.
    """
    try:
        data = _dumps(line)
        problem = f"facts of {len(data)} bytes exceed the line limit" if len(data) > MAX_LINE_BYTES else None
    except UnicodeEncodeError:
        data, problem = b"", "facts hold text that is not valid Unicode"
    if problem and isinstance(line.get("facts"), dict):
        line = {**line, "facts": {"kind": line["facts"].get("kind"), "error": problem}}
        data = _dumps(line)
    return data


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8") + b"\n"


def write_lines(lines: Iterable[dict[str, Any]], out: _Writer) -> dict[str, Any]:
    """Write encoded lines to ``out`` in batches; return the last line (the trailer)."""
    batch: list[bytes] = []
    pending = 0
    last: dict[str, Any] = {}
    for line in lines:
        data = encode_line(line)
        batch.append(data)
        pending += len(data)
        last = line
        if pending >= 256 * 1024:
            out.write(b"".join(batch))
            batch, pending = [], 0
    out.write(b"".join(batch))
    return last
