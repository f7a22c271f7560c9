"""ckptfleet-agent: report the checkpoint files below this host's roots to a Checkpoint Fleet server.

The agent walks each root it is given, reads a few small facts from the files that checkpoint
formats use as manifests (DCP ``.metadata``, safetensors headers, HF index files, trainer state,
tracker files, the tail of ``torch.save`` zips), optionally hashes file contents, and uploads one
inventory per root as gzip-compressed NDJSON (see ``docs/wire-format.md``). It reports facts; the
server judges what is complete.

It is one file that needs only the Python standard library (3.8 or newer), so it can be copied onto
a locked-down GPU host and run as ``python3 agent.py``; installed with the project it is
``ckptfleet-agent``, and in a checkout ``python -m fleet.agent`` (not ``python fleet/agent.py``, which
would put ``fleet/`` on ``sys.path``, where ``fleet/selectors.py`` shadows the standard library's).

Usage::

    export CKPTFLEET_SERVER=https://fleet.example.com
    export CKPTFLEET_TOKEN_FILE=/etc/ckptfleet/token        # or CKPTFLEET_TOKEN=cfh_...
    ckptfleet-agent --root /mnt/nvme0/checkpoints --root /mnt/nvme1/checkpoints [--checksums] [--wait]
    ckptfleet-agent --root /mnt/nvme0/checkpoints --checksums --scrub-share 0.05  # and re-verify 5% of the bytes
    ckptfleet-agent --root /mnt/nvme0/checkpoints --dry-run   # print the NDJSON, contact nobody
    ckptfleet-agent --root /mnt/nvme0/checkpoints --deletions # delete what the server scheduled, report back
    ckptfleet-agent --root /mnt/nvme0/checkpoints --pulls     # fetch what promotions asked for, report back
    ckptfleet-agent --root /mnt/nvme0/checkpoints --offloads  # upload what offloads move to a bucket, report back
    ckptfleet-agent lease take 42 --owner resume-job-7 --ttl 3600   # nothing deletes or demotes it meanwhile
    ckptfleet-agent lease renew 5 --ttl 3600; ckptfleet-agent lease release 5

The token is never taken from the command line (it would show in ``ps`` and shell history) and is
never printed. Every error is one line on stderr starting with ``ckptfleet-agent:`` and the exit
status is non-zero: 1 when something failed, 2 for a usage error.

What is reported and what is skipped:

- one ``file`` line per regular file below the root, in path order; symlinks (even ``last.ckpt``
  style ones) and special files are skipped and never followed;
- a name the server would refuse (not valid UTF-8, a control character or a backslash, a path over
  4096 bytes) is skipped with a warning on stderr, and so is a directory that cannot be read or a
  file that vanishes during the walk: one odd entry must not cost the host its whole inventory, and
  a missing file makes the server see a checkpoint as less complete, never more;
- the root itself is given as an absolute path with symlinks left as they are, because it must
  match a registered root exactly; it must exist, else nothing is sent.

With ``--pulls`` the agent fetches the files promotions asked this host for (``/api/v1/agent/promotions/``):
each is downloaded from its presigned URL into ``.ckptfleet-pull-<random>.tmp`` beside its target,
checked (size; sha256 when the server knows it; the MD5 of a single-part ETag, never of a multipart
``...-N`` one), fsynced and linked to its name, never replacing an existing file (an identical one
counts as pulled). Paths must be plain relative paths below the root with no symlink on the way. Each
file is reported back; a root that received files is then reported (an inventory) as usual. Trouble
that may pass (the network, the store's 5xx, an expired URL) leaves the file for the next run.

With ``--offloads`` the agent uploads the files offloads asked of this host (``/api/v1/agent/offloads/``)
with URLs the server signs, so the host needs no S3 credentials: ``--jobs`` files at once (default 8),
each read once for its sha256 and MD5 while it is sent, by one PUT that the store refuses if the key
exists (If-None-Match: *) or, for a large file, part by part into a multipart upload the server started
and completes. A part the store holds already (a killed run) is read but not sent again. Paths must be
plain relative paths below the root, with no symlink on the way or at the end. Each file is reported;
the server checks the store's copy before counting it. Trouble that may pass is retried, then left.

With ``--checksums`` every file is read once for its sha256 and, in the same pass, its CRCs: crc32
(zlib) always, crc32c and crc64nvme when the optional module ``awscrt`` imports (``pip install
awscrt``; the agent says on stderr which it computes). Beside the whole-file CRCs it sends the CRC32
(and CRC32C) of every 1 MiB block (2, 4, ... MiB for files over 10,000 MiB), which the server
combines into the composite checksum S3 keeps for a multipart upload (boto3, the aws CLI, s5cmd,
rclone): so a host copy can be compared with a bucket copy. The CRCs run on a worker thread while
sha256 runs on the reading one (a small file's while the walk reads the next files). For a
``torch.save`` zip the CRC32 of every member is checked against the one its zip headers record, from
the same bytes (``members_checked``, ``members_bad`` in its facts). Results are cached in SQLite
keyed by (device, inode, size, mtime_ns), so an unchanged file is never read again; a file that
changes while it is read is sent without checksums. Each line says when its checksums were taken
(``checksummed_at``).

Bit rot does not change a file's mtime, so cached checksums go stale. ``--scrub-share 0.05`` re-reads,
in each root, the files whose checksums are oldest, about 5% of the root's bytes per run, at most
``--scrub-rate`` MiB/s (default 200, so training I/O does not suffer; first-time hashing is not
throttled), and sends what it finds; a file whose content changed without a new mtime is named on
stderr ("content changed without a new mtime: bit rot or an in-place write"). Run daily, every file
is verified again within about 20 days, e.g. from cron::

    17 3 * * * ckptfleet ckptfleet-agent --root /mnt/nvme0/checkpoints --checksums --scrub-share 0.05 --scrub-rate 200
"""

from __future__ import annotations

import os as _os
import sys as _sys

# Run as `python3 fleet/agent.py` inside the repository, the script's folder would come first on
# sys.path and its sibling modules (fleet/selectors.py) would shadow the standard library's.
if (
    __name__ == "__main__"
    and _sys.path
    and _os.path.abspath(_sys.path[0]) == _os.path.dirname(_os.path.abspath(__file__))
):
    del _sys.path[0]

import argparse
import base64
import bisect
import builtins
import collections
import concurrent.futures
import contextlib
import dataclasses
import errno
import gzip
import hashlib
import http.client
import io
import json
import os
import pickle
import queue
import re
import socket
import sqlite3
import ssl
import stat
import struct
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Protocol, cast

try:  # optional: hardware CRC32C and CRC64/NVME (pip install awscrt); the agent runs without it
    from awscrt import checksums as _crt
except ImportError:
    _crt = None

__version__ = "0.1.0"
__all__ = [
    "CRC_ALGORITHMS",
    "AgentError",
    "CachedChecksums",
    "ChecksumCache",
    "FileChecksums",
    "checksum_file",
    "crc_block_size",
    "crc_combine",
    "crc_of_blocks",
    "encode_line",
    "facts_kind",
    "file_facts",
    "filesystem_space",
    "inventory_lines",
    "main",
    "scan_root",
    "sha256_file",
    "stream_facts",
    "upload_inventory",
    "wait_for_inventory",
    "zip_members",
]

PROG = "ckptfleet-agent"
AGENT = f"{PROG}/{__version__}"
WIRE_FORMAT = "ckptfleet-inventory/1"
INVENTORIES_PATH = "/api/v1/inventories/"
DELETIONS_PATH = "/api/v1/agent/deletions/"
_TRASH_WORDS = (("trashed", "moved to the trash"), ("purged", "purged"), ("restored", "restored"))
TRASH_DIR = ".ckptfleet-trash"  # below each root: soft-deleted files until the server says purge or restore
PULLS_PATH = "/api/v1/agent/promotions/"
OFFLOADS_PATH = "/api/v1/agent/offloads/"
OFFLOADS_SIGN_PATH = "/api/v1/agent/offloads/sign/"
DEFAULT_JOBS = 8  # files uploaded at once by --offloads
PULL_TEMP_PREFIX = ".ckptfleet-pull-"  # a download in progress, beside its target: .ckptfleet-pull-<random>.tmp
PULL_TEMP_SUFFIX = ".tmp"
URL_MARGIN_SECONDS = 60.0  # a presigned URL this close to expiring is asked for again before its download
REPORT_EVERY = 50  # pull results per report at most
REPORT_SECONDS = 15.0  # and at least this often while files arrive, so the server shows progress
MTIME_TOLERANCE_NS = 2000  # the server keeps microseconds; a float round trip adds less than this

MAX_PATH_BYTES = 4096
MAX_LINE_BYTES = 4 * 1024 * 1024  # the server's default CKPTFLEET_INVENTORY_MAX_LINE
HASH_BLOCK = 1024 * 1024
SAFETENSORS_MAX_HEADER = 100_000_000  # huggingface/safetensors refuses larger headers
DCP_MAX_BYTES = 64 * 1024 * 1024
JSON_FACTS_MAX_BYTES = 1024 * 1024
BIG_JSON_MAX_BYTES = 64 * 1024 * 1024  # index and trainer_state files: only a field is sent
TEXT_FACTS_BYTES = 256
ZIP_TAIL_BYTES = 64 * 1024
CACHE_FORGET_SECONDS = 90 * 24 * 3600
DEFAULT_CACHE = "~/.cache/ckptfleet-agent/checksums.sqlite3"
MIB = 1024 * 1024
# The CRCs this agent sends besides sha256: crc32 always (zlib), the others when awscrt imports.
CRC_ALGORITHMS: tuple[str, ...] = ("crc32", "crc32c", "crc64nvme") if _crt is not None else ("crc32",)
CRC_BLOCK_MIN = MIB  # block CRCs: 1 MiB blocks, doubled while a file would have more than
CRC_MAX_BLOCKS = 10_000  # this many (S3's part limit, which boto3 doubles its 8 MiB part size to meet)
CHECKSUM_CHUNK = MIB  # one read; a divisor of every block size, so reads never straddle a block
CHECKSUM_BUFFERS = 3  # one being read, one being CRC'd, one spare: the worker never waits for a read
CHECKSUM_INLINE_BYTES = 256 * 1024  # smaller files: no hand-off per buffer; a walk hands each whole (_Pipeline)
CHECKSUM_DEFER_BYTES = 32 * 1024  # and of those, ones this short still on the reading thread (cheaper than a hand-off)
CHECKSUM_BATCH_FILES = 8  # small files are handed to the worker this many at a time (one wake-up for all)
CHECKSUM_BATCH_BYTES = MIB  # or this many bytes of them
PIPELINE_FILES = 64  # a walk goes on reading while at most this many lines wait for their CRCs (0: never)
PIPELINE_BYTES = 16 * MIB  # holding at most this many bytes of file content
ZIP_DIRECTORY_MAX_BYTES = 64 * MIB
MEMBERS_BAD_MAX = 10
DEFAULT_SCRUB_RATE = 200.0  # MiB/s

# The server's own path rules (fleet/ingest.py check_path); anything else fails the whole inventory.
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")
REFUSED_PATH_CHARS = re.compile(r"[\x00-\x1f\x7f\\\ud800-\udfff]")
_DCP_METADATA = re.compile(r"^(?:\.metadata|__\d+\.metadata)$")
_JSON_NAMES = frozenset({"metadata.json", "integrity.json", "_CHECKPOINT_METADATA", "ckptfleet.json", "config.json"})
_TEXT_NAMES = frozenset({"latest", "latest_checkpointed_iteration.txt", "commit_success.txt"})
_TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
_SINGLE_PART_ETAG = re.compile(r"^[0-9a-f]{32}$")  # an MD5; a multipart upload's ETag ends in -N and is none
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")  # a file line's "sha256" (wire contract)
# torch.save's legacy (pre-zip) format starts with this magic number as a pickled long.
_LEGACY_TORCH_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")

if TYPE_CHECKING:  # only in annotations: subscripting abc.Callable fails at run time before 3.9
    Warn = Callable[[str], None]


class _Writer(Protocol):
    def write(self, data: bytes, /) -> object: ...


def path_problem(path: object) -> str:
    """Why ``path`` is not a file line's path under the wire contract, or "" when it is one: a non-empty relative
    path below the root, at most ``MAX_PATH_BYTES`` of UTF-8, no NUL, control character or backslash, no empty, "."
    or ".." component. The agent checks what it sends and what the server asks of it; the server imports this."""
    if not isinstance(path, str) or not path:
        return "path must be a non-empty string"
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        return f"path is longer than {MAX_PATH_BYTES} bytes"
    if _CONTROL_CHARS.search(path):
        return "path contains a NUL or control character"
    if path.startswith("/"):
        return "path must be relative to the root, not absolute"
    if "\\" in path:
        return "path contains a backslash"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return f"path has an empty, '.' or '..' component: {path!r}"
    if REFUSED_PATH_CHARS.search(path):  # what is left of them: a lone surrogate
        return "path is not valid UTF-8"
    return ""


class _ReadInto(Protocol):
    def readinto(self, buffer: bytearray, /) -> int | None: ...

    def read(self, size: int = -1, /) -> bytes: ...


class AgentError(Exception):
    """A failure explained in one line. ``fatal`` ones (no server, bad token) stop the other roots too."""

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


def _one_line(text: object, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _printable(path: str) -> str:
    """A path as it can safely be shown on a terminal: undecodable bytes and controls escaped."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def _stderr_warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


# --- walking a root -------------------------------------------------------------------------------


def _check_root(root: str) -> None:
    try:
        root.encode("utf-8")
    except UnicodeEncodeError:
        raise AgentError(f"root {_printable(root)} is not valid UTF-8, so no server can match it") from None
    if not os.path.exists(root):
        raise AgentError(f"root {_printable(root)} does not exist")
    if not os.path.isdir(root):
        raise AgentError(f"root {_printable(root)} is not a directory")


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
                warn(f"{_printable(os.path.join(root, prefix + entry.name))}: skipped: {_os_reason(exc)}")
                continue
            rel = prefix + entry.name
            why = _refusal_reason(entry.name)
            if why:
                what = "directory and everything below it" if is_dir else "file"
                warn(f"{_printable(os.path.join(root, rel))}: {what} skipped because {why}")
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
    worker thread (``_Pipeline``). Raises AgentError if ``root`` is unusable.
    """
    warn = _stderr_warn if warn is None else warn
    root = os.path.abspath(root)
    _check_root(root)
    try:
        top = _list_dir(root, "", root, warn)
    except OSError as exc:
        raise AgentError(f"cannot read root {_printable(root)}: {_os_reason(exc)}") from None
    scrub = cache.begin_walk(root) if checksums and cache is not None else None
    # Small files' CRCs are computed while the walk reads on; their lines wait here to leave in order.
    pipe = _Pipeline(warn) if checksums and PIPELINE_FILES > 0 else None
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
                    f"{_printable(entry.path)}: directory skipped, its files are left out of the "
                    f"inventory: {_os_reason(exc)}"
                )
            continue
        if pipe is None:
            line = _file_line(entry, rel, checksums=checksums, cache=cache, warn=warn, root=root, scrub=scrub)
            if line is not None:
                yield cast(dict[str, Any], line)  # nothing is left pending without a pipe
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
    """A file line whose checksums are under way (see ``_Pipeline``); ``finish`` gives the line."""

    __slots__ = ("facts", "inode", "line", "nbytes", "sums", "zip_check")

    def __init__(
        self,
        line: dict[str, Any],
        facts: dict[str, Any] | None,
        zip_check: bool,
        sums: _PendingChecksums,
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


class _Pipeline:
    """The lines of a walk with checksums that wait for their CRCs, kept in path order.

    A small file is read whole and its sha256 taken on the walking thread, its CRCs left to the worker
    thread (``checksum_file(later=True)``), and the walk reads the next files meanwhile instead of
    waiting: so its CRCs cost the other core's time, not the walk's. Each line leaves in its turn once
    its CRCs are done and the rest of ``_checksum`` has run for it (the change check, the warnings, the
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
    scrub: _ScrubPlan | None = None,
    later: bool = False,
) -> dict[str, Any] | _PendingLine | None:
    if len(rel.encode("utf-8")) > MAX_PATH_BYTES:
        warn(f"{_printable(entry.path)}: skipped because its path is longer than {MAX_PATH_BYTES} bytes")
        return None
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError as exc:
        warn(f"{_printable(entry.path)}: skipped: {_os_reason(exc)}")
        return None
    if not stat.S_ISREG(st.st_mode):
        return None  # replaced by something else since the directory was listed
    line: dict[str, Any] = {"type": "file", "path": rel, "size": st.st_size, "mtime": st.st_mtime_ns / 1e9}
    facts = file_facts(entry.path)
    if not checksums:
        return _with_checksums(line, facts, False, None)
    zip_check = facts is not None and facts.get("kind") == "torch_file" and facts.get("container") == "zip"
    sums = _checksum(entry.path, st, cache, warn, zip_check=zip_check, root=root, scrub=scrub, later=later)
    if isinstance(sums, _PendingChecksums):
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
    _check_root(root)
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


def _write_lines(lines: Iterable[dict[str, Any]], out: _Writer) -> dict[str, Any]:
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


# --- facts ----------------------------------------------------------------------------------------


class _FactsError(Exception):
    pass


def facts_kind(name: str) -> str | None:
    """Which facts (if any) the wire format asks for about a file with this name."""
    if _DCP_METADATA.match(name):
        return "dcp_metadata"
    if name == "trainer_state.json":
        return "trainer_state"
    if name in _JSON_NAMES:
        return "json"
    if name in _TEXT_NAMES:
        return "text"
    if name.endswith(".index.json"):
        return "hf_index"
    if name.endswith(".safetensors"):
        return "safetensors"
    if name.endswith(_TORCH_SUFFIXES):
        return "torch_file"
    return None


def file_facts(path: str) -> dict[str, Any] | None:
    """The facts object for the file at ``path``, or None when its name calls for none.

    Only headers, tails and small manifests are read. Any failure becomes
    ``{"kind": ..., "error": "one line"}``; this never raises for a bad or unreadable file.
    """
    name = os.path.basename(path)
    kind = facts_kind(name)
    if kind is None:
        return None
    try:
        with _open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            return stream_facts(name, f, size)
    except _FactsError as exc:
        return {"kind": kind, "error": _one_line(exc)}
    except OSError as exc:
        return {"kind": kind, "error": _one_line(f"cannot read: {_os_reason(exc)}")}


def stream_facts(name: str, f: BinaryIO, size: int) -> dict[str, Any] | None:
    """The facts object for a file called ``name`` (its base name), read from ``f`` of ``size`` bytes.

    ``f`` is any seekable binary stream positioned at the start: an open file here, a reader of
    ranged GETs on the server's bucket scanner. Only headers, tails and small manifests are read.
    None when the name calls for no facts; any failure becomes ``{"kind": ..., "error": "one line"}``,
    so this never raises for a bad or unreadable file.
    """
    kind = facts_kind(name)
    if kind is None:
        return None
    try:
        if kind == "torch_file":
            return _torch_file_facts(f, size, name=name)
        return _READERS[kind](f, size)
    except _FactsError as exc:
        return {"kind": kind, "error": _one_line(exc)}
    except OSError as exc:
        return {"kind": kind, "error": _one_line(f"cannot read: {_os_reason(exc)}")}
    except Exception as exc:  # a hostile or corrupt file must never stop the scan
        return {"kind": kind, "error": _one_line(f"{type(exc).__name__}: {exc}")}


def _open_regular(path: str) -> io.FileIO:
    # O_NOFOLLOW and O_NONBLOCK: a file swapped for a symlink or a FIFO after the listing is neither
    # followed nor allowed to block the agent.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _FactsError("not a regular file")
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _read_exact(f: BinaryIO, n: int) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        chunk = f.read(min(n, HASH_BLOCK))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_at(f: BinaryIO, offset: int, n: int) -> bytes:
    f.seek(offset)
    return _read_exact(f, n)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _reject_constant(name: str) -> Any:
    raise _FactsError(f"invalid JSON: {name} is not a number")


def _load_json(f: BinaryIO, size: int, limit: int) -> Any:
    if size > limit:
        raise _FactsError(f"file is {size} bytes, over the {limit // (1024 * 1024)} MiB read limit")
    raw = _read_exact(f, limit + 1)
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise _FactsError("not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the decoder recurses
        raise _FactsError(f"invalid JSON: {exc}") from None


def _safetensors_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    if size < 8:
        raise _FactsError(f"file is {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", _read_exact(f, 8))
    if n > SAFETENSORS_MAX_HEADER:
        raise _FactsError(f"header length {n} is over the {SAFETENSORS_MAX_HEADER}-byte limit")
    if 8 + n > size:
        raise _FactsError(f"header of {n} bytes is cut off: the file has {size} bytes")
    try:
        header = json.loads(_read_exact(f, n).decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _FactsError(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise _FactsError("header is not a JSON object")
    tensors = 0
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(_is_count(o) for o in offsets)
            and offsets[0] <= offsets[1]
        ):
            raise _FactsError(f"tensor {name[:80]!r} has no valid data_offsets")
        tensors += 1
        end = max(end, offsets[1])
    return {"kind": "safetensors", "expected_size": 8 + n + end, "tensors": tensors}


def _hf_index_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    doc = _load_json(f, size, BIG_JSON_MAX_BYTES)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise _FactsError("no weight_map of tensor names to shard files")
    metadata = doc.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    return {
        "kind": "hf_index",
        "total_size": total if _is_count(total) else None,
        "shards": sorted(set(weight_map.values())),
    }


def _trainer_state_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    doc = _load_json(f, size, BIG_JSON_MAX_BYTES)
    step = doc.get("global_step") if isinstance(doc, dict) else None
    if not _is_count(step):
        raise _FactsError("no integer global_step")
    return {"kind": "trainer_state", "global_step": step}


def _json_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    content = _load_json(f, size, JSON_FACTS_MAX_BYTES)
    return {"kind": "json", "content": content}


def _text_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    raw = _read_exact(f, TEXT_FACTS_BYTES)
    if b"\x00" in raw:
        # A tracker full of zeros is what a crash between allocation and write leaves behind.
        raise _FactsError("file contains NUL bytes")
    return {"kind": "text", "content": raw.decode("utf-8", "replace").strip()}


def _torch_file_facts(f: BinaryIO, size: int, *, name: str = "") -> dict[str, Any]:
    head = _read_exact(f, 32)
    if head.startswith(b"PK\x03\x04"):
        facts: dict[str, Any] = {"kind": "torch_file", "container": "zip", "complete": _zip_complete(f, size)}
        if name.endswith("model_states.pt") and facts["complete"]:
            recorded = _deepspeed_counts(f)
            if recorded:
                facts["deepspeed"] = recorded
        return facts
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        if _LEGACY_TORCH_MAGIC in head:
            # Legacy torch.save appends raw tensor storages after its pickles, so the last byte
            # says nothing about completeness.
            return {"kind": "torch_file", "container": "pickle", "complete": None}
        return {"kind": "torch_file", "container": "pickle", "complete": _read_at(f, size - 1, 1) == b"."}
    return {"kind": "torch_file", "container": "unknown", "complete": None}


def _zip_complete(f: BinaryIO, size: int) -> bool:
    """True when a well-formed end-of-central-directory record ends the file.

    A mere signature match is not enough: the tail of a truncated shard is tensor data, which may
    contain ``PK\\x05\\x06`` by chance, and a partial write must never look complete. The record
    must end exactly at the end of the file (after its comment), its central directory must lie
    before it, and a ZIP64 archive's record must be preceded by its ZIP64 locator.
    """
    for tail, base, pos in _zip_end_candidates(f, size):
        cd_size, cd_offset = struct.unpack("<II", tail[pos + 12 : pos + 20])
        if cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:
            if pos >= 20 and tail[pos - 20 : pos - 16] == b"PK\x06\x07":
                return True
        elif cd_offset + cd_size <= base + pos:
            return True
    return False


def _zip_end_candidates(f: BinaryIO, size: int) -> Iterator[tuple[bytes, int, int]]:
    """(tail, its offset in the file, position in it) of each end-of-central-directory record in the last
    64 KiB + 22 bytes whose comment reaches exactly to the end of the file, the last one first."""
    tail_len = min(size, ZIP_TAIL_BYTES + 22)
    base = size - tail_len
    tail = _read_at(f, base, tail_len)
    pos = tail.rfind(b"PK\x05\x06")
    while pos >= 0:
        if pos + 22 <= len(tail):
            (comment_len,) = struct.unpack("<H", tail[pos + 20 : pos + 22])
            if pos + 22 + comment_len == len(tail):
                yield tail, base, pos
        pos = tail.rfind(b"PK\x05\x06", 0, pos)


def _dcp_metadata_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    if size > DCP_MAX_BYTES:
        raise _FactsError(f"file is {size} bytes, over the 64 MiB read limit")
    data = _read_exact(f, DCP_MAX_BYTES)
    if not data:
        raise _FactsError("file is empty")
    try:
        metadata = _RestrictedUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError) as exc:
        raise _FactsError(f"cannot unpickle: {exc or 'truncated'}") from None
    return {"kind": "dcp_metadata", "files": _dcp_files(metadata)}


def _deepspeed_counts(f: BinaryIO) -> dict[str, int]:
    """The world sizes a DeepSpeed ``*model_states.pt`` records about its save: ``dp_world_size`` (how many
    data-parallel ranks wrote an optimizer file per model-parallel rank) and ``mp_world_size``, read from the
    zip's ``data.pkl`` with inert stubs for every class (nothing of the file runs). {} when it has neither."""
    try:
        archive = zipfile.ZipFile(f)
        member = next((i for i in archive.infolist() if i.filename.endswith("/data.pkl")), None)
        if member is None or member.file_size > DCP_MAX_BYTES:
            return {}
        with archive.open(member) as pkl:
            state = _InertUnpickler(pkl).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, KeyError, TypeError, OSError):
        return {}
    if not isinstance(state, dict):
        return {}
    return {key: state[key] for key in ("dp_world_size", "mp_world_size") if _is_count(state.get(key))}


_READERS: dict[str, Callable[[BinaryIO, int], dict[str, Any]]] = {
    "dcp_metadata": _dcp_metadata_facts,
    "safetensors": _safetensors_facts,
    "hf_index": _hf_index_facts,
    "trainer_state": _trainer_state_facts,
    "json": _json_facts,
    "text": _text_facts,
    "torch_file": _torch_file_facts,
}


# --- reading DCP metadata without torch and without running anything ------------------------------


class _Stub:
    """Inert stand-in for a torch.* or pathlib.* class: it keeps what it is given and runs nothing.

    It accepts every way pickle builds an object: positional and keyword constructor arguments
    (REDUCE, NEWOBJ, NEWOBJ_EX) and any ``__setstate__`` state, whether a dataclass ``__dict__``,
    a ``(dict, slots-dict)`` pair, or a tuple or list such as TensorProperties sends.
    """

    _ckpt_global = "?"

    def __new__(cls, *args: Any, **kwargs: Any) -> _Stub:
        self = object.__new__(cls)
        self.__dict__["_ckpt_args"] = args
        self.__dict__["_ckpt_attrs"] = dict(kwargs)
        self.__dict__["_ckpt_state"] = None
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        attrs = self.__dict__["_ckpt_attrs"]
        if isinstance(state, dict):
            attrs.update(state)
        elif isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
            for part in state:
                attrs.update(part or {})
        else:
            self.__dict__["_ckpt_state"] = state

    def __reduce__(self) -> Any:
        raise TypeError("a stub of a pickled class cannot be pickled again")

    def __repr__(self) -> str:
        return f"<stub {self._ckpt_global}>"


_SAFE_BUILTINS: dict[str, Any] = {
    name: getattr(builtins, name) for name in ("set", "frozenset", "slice", "complex", "tuple", "list", "dict")
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles DCP metadata with stubs for torch and pathlib classes, and refuses every other global."""

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file)
        self._stubs: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name == "Size":
            return tuple
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module in ("builtins", "__builtin__") and name in _SAFE_BUILTINS:
            return _SAFE_BUILTINS[name]
        if module in ("torch", "pathlib") or module.startswith(("torch.", "pathlib.")):
            key = (module, name)
            if key not in self._stubs:
                self._stubs[key] = type("Stub", (_Stub,), {"_ckpt_global": f"{module}.{name}"})
            return self._stubs[key]
        raise pickle.UnpicklingError(f"refused to load global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id")


class _InertUnpickler(_RestrictedUnpickler):
    """Unpickles a torch.save ``data.pkl`` for a few plain values: every global is an inert stub (no code of
    the file runs) and every tensor storage a persistent id that is kept, never loaded."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except pickle.UnpicklingError:
            key = (module, name)
            if key not in self._stubs:
                self._stubs[key] = type("Stub", (_Stub,), {"_ckpt_global": f"{module}.{name}"})
            return self._stubs[key]

    def persistent_load(self, pid: Any) -> Any:
        return None


def _field(obj: Any, name: str, index: int) -> Any:
    """Attribute ``name`` of an unpickled object, else its ``index``-th positional value (field order)."""
    if isinstance(obj, _Stub):
        attrs = obj.__dict__["_ckpt_attrs"]
        if name in attrs:
            return attrs[name]
        for values in (obj.__dict__["_ckpt_state"], obj.__dict__["_ckpt_args"]):
            if isinstance(values, (list, tuple)) and len(values) > index:
                return values[index]
        raise _FactsError(f"{obj._ckpt_global} has no {name}")
    if isinstance(obj, dict) and name in obj:
        return obj[name]
    if isinstance(obj, (list, tuple)) and len(obj) > index:
        return obj[index]
    raise _FactsError(f"{type(obj).__name__} has no {name}")


def _dcp_files(metadata: Any) -> dict[str, int]:
    """Every file named in Metadata.storage_data with the least size it must have: max(offset + length)."""
    # Field order of torch's dataclasses, for states that arrive as bare sequences.
    storage = _field(metadata, "storage_data", 2)
    if not isinstance(storage, dict):
        raise _FactsError("Metadata.storage_data is not a mapping")
    files: dict[str, int] = {}
    for info in storage.values():
        rel = _field(info, "relative_path", 0)
        offset = _field(info, "offset", 1)
        length = _field(info, "length", 2)
        if not isinstance(rel, str) or not rel:
            raise _FactsError("a storage entry has no relative_path")
        if not (_is_count(offset) and _is_count(length)):
            raise _FactsError(f"storage entry of {rel[:80]!r} has a bad offset or length")
        files[rel] = max(files.get(rel, 0), offset + length)
    return dict(sorted(files.items()))


# --- checksums ------------------------------------------------------------------------------------

# The CRCs S3 stores (AWS "Checking object integrity"): all reflected, with all-ones init and xorout,
# so they combine like zlib's crc32_combine. (width in bits, reflected polynomial)
_CRC_PARAMS: dict[str, tuple[int, int]] = {
    "crc32": (32, 0xEDB88320),
    "crc32c": (32, 0x82F63B78),
    "crc64nvme": (64, 0x9A6C9329AC4BC9B5),
}


class _CrcMath:
    """Polynomial arithmetic modulo one CRC's polynomial, in its reflected bit order (zlib's crc32.c).

    ``crc(A + B) = crc(A) * x^(8 * len(B)) + crc(B)`` (mod P): combining is one multiplication by an
    operator that depends on len(B) only, so the operators of lengths seen often are kept.
    """

    def __init__(self, width: int, poly: int) -> None:
        self.width = width
        self.poly = poly
        self.one = 1 << (width - 1)  # x^0 in reflected order
        # x^(2^k) mod P for k up to 71: enough for any length below 2^64 bytes (the 3 is 8 bits a byte).
        table = [1 << (width - 2)]
        for _ in range(71):
            table.append(self.mult(table[-1], table[-1]))
        self._x2n = table
        self._ops: dict[int, int] = {}
        self._tables: dict[int, list[list[int]]] = {}

    def mult(self, a: int, b: int) -> int:
        if not a:
            return 0
        m, p, poly = self.one, 0, self.poly
        while True:
            if a & m:
                p ^= b
                if not a & (m - 1):
                    return p
            m >>= 1
            b = (b >> 1) ^ poly if b & 1 else b >> 1

    def operator(self, nbytes: int) -> int:
        """x^(8 * nbytes) mod P."""
        op = self._ops.get(nbytes)
        if op is None:
            op, k, n = self.one, 3, nbytes
            while n:
                if n & 1:
                    op = self.mult(self._x2n[k], op)
                n >>= 1
                k += 1
            if len(self._ops) >= 4096:
                self._ops.clear()  # member boundaries make many lengths; only the block size recurs
            self._ops[nbytes] = op
        return op

    def combine(self, crc1: int, crc2: int, len2: int) -> int:
        if len2 <= 0:
            return crc1
        if len2 % MIB:
            return self.mult(self.operator(len2), crc1) ^ crc2
        # Whole MiB: a buffer or a block, joined thousands of times a file. Multiplying by a fixed
        # operator is linear, so it is a lookup per byte of crc1 in tables made once per length.
        tables = self._tables.get(len2) or self._table(len2)
        out = crc2
        for table in tables:
            out ^= table[crc1 & 0xFF]
            crc1 >>= 8
        return out

    def _table(self, nbytes: int) -> list[list[int]]:
        op = self.operator(nbytes)
        basis = [self.mult(op, 1 << bit) for bit in range(self.width)]
        tables = []
        for low in range(0, self.width, 8):
            table = [0]
            for bit in range(8):
                table += [value ^ basis[low + bit] for value in table]
            tables.append(table)
        if len(self._tables) >= 64:
            self._tables.clear()
        self._tables[nbytes] = tables
        return tables


_CRC_MATH = {algo: _CrcMath(*params) for algo, params in _CRC_PARAMS.items()}
_CRC_HEX_DIGITS = {"crc32": 8, "crc32c": 8, "crc64nvme": 16}


def crc_combine(algo: str, crc1: int, crc2: int, len2: int) -> int:
    """The CRC (``"crc32"``, ``"crc32c"`` or ``"crc64nvme"``) of A + B from crc(A), crc(B) and len(B).

    Pure Python (zlib's crc32_combine, generalised to any reflected CRC with all-ones init and
    xorout): a few microseconds, whether or not awscrt is installed.
    """
    if algo not in _CRC_MATH:
        raise ValueError(f"unknown CRC {algo!r}; known: {', '.join(_CRC_PARAMS)}")
    if len2 < 0:
        raise ValueError("len2 must be >= 0")
    return _CRC_MATH[algo].combine(crc1, crc2, len2)


def crc_block_size(size: int) -> int:
    """The block size of a file of ``size`` bytes: 1 MiB, doubled while it would make over 10,000 blocks.

    So it is a power-of-two number of MiB, never larger than the part size boto3 and the aws CLI
    choose (8 MiB, doubled while over 10,000 parts), and every such part boundary is a block boundary.
    """
    block = CRC_BLOCK_MIN
    while -(-size // block) > CRC_MAX_BLOCKS:
        block *= 2
    return block


def crc_of_blocks(algo: str, block_crcs: list[int], block_size: int, total_size: int, part_size: int) -> list[int]:
    """The CRC of each part of a ``total_size``-byte file cut into ``part_size`` parts (the last shorter),
    combined from the CRCs of its ``block_size`` blocks (the last shorter) as the agent sends them.

    An S3 multipart object's composite checksum is then the CRC of the parts' big-endian CRCs
    concatenated, with ``-<len(parts)>``. Raises ValueError when ``part_size`` is not a multiple of
    ``block_size`` or the block count does not fit the size.
    """
    if algo not in _CRC_MATH:
        raise ValueError(f"unknown CRC {algo!r}; known: {', '.join(_CRC_PARAMS)}")
    if block_size <= 0 or part_size <= 0 or part_size % block_size:
        raise ValueError(f"part size {part_size} is not a multiple of the block size {block_size}")
    if total_size < 0 or len(block_crcs) != -(-total_size // block_size):
        raise ValueError(f"{len(block_crcs)} block CRCs do not make a file of {total_size} bytes")
    math_ = _CRC_MATH[algo]
    per_part = part_size // block_size
    parts = []
    for first in range(0, len(block_crcs), per_part):
        value = block_crcs[first]
        for i in range(first + 1, min(first + per_part, len(block_crcs))):
            value = math_.combine(value, block_crcs[i], min(block_size, total_size - i * block_size))
        parts.append(value)
    return parts


def _crc_hex(algo: str, value: int) -> str:
    return format(value, f"0{_CRC_HEX_DIGITS[algo]}x")


class _ZipMember:
    """One member of a zip being checked: where its data lies, what its CRC must be, and what was seen."""

    __slots__ = ("bad", "crc", "done", "end", "inflater", "method", "name", "out", "seen", "size", "start")

    def __init__(self, name: str, start: int, end: int, method: int, crc: int, size: int) -> None:
        self.name, self.start, self.end, self.method, self.crc, self.size = name, start, end, method, crc, size
        self.bad = ""  # why it is bad, known before its data is read (a broken header, data past the end)
        self.seen = 0  # CRC32 of its stored bytes (STORED) or of what they inflate to (DEFLATED)
        self.done = 0  # stored bytes fed so far
        self.out = 0  # bytes inflated so far
        self.inflater: Any = zlib.decompressobj(-15) if method == _ZIP_DEFLATED else None

    def add(self, crc: int, length: int) -> None:
        """The CRC32 of the next ``length`` stored bytes of this (STORED) member."""
        self.seen = crc if not self.done else _CRC_MATH["crc32"].combine(self.seen, crc, length)
        self.done += length

    def inflate(self, data: memoryview) -> None:
        """The next stored bytes of this (DEFLATED) member, in order."""
        if not self.bad:
            try:
                chunk = self.inflater.decompress(data, CHECKSUM_CHUNK)
                while True:
                    self.seen = zlib.crc32(chunk, self.seen)
                    self.out += len(chunk)
                    if self.out > self.size:
                        self.bad = "inflates to more than its recorded size"
                        break
                    if not self.inflater.unconsumed_tail:
                        break
                    chunk = self.inflater.decompress(self.inflater.unconsumed_tail, CHECKSUM_CHUNK)
            except zlib.error:
                self.bad = "does not inflate"
        self.done += len(data)

    def verdict(self) -> bool:
        """True when the member's data matched its recorded CRC32 (and size)."""
        if self.bad:
            return False
        if self.inflater is not None:
            try:
                tail = self.inflater.flush()
            except zlib.error:
                return False
            self.seen = zlib.crc32(tail, self.seen)
            self.out += len(tail)
            if not self.inflater.eof or self.out != self.size:
                return False
        elif self.done != self.end - self.start:
            return False
        return self.seen == self.crc


_ZIP_STORED = 0
_ZIP_DEFLATED = 8


def zip_members(f: BinaryIO, size: int) -> list[_ZipMember] | None:
    """The members of the zip in ``f`` whose CRC32 can be checked (STORED and DEFLATED, not encrypted),
    from its central directory (ZIP64 aware) and local headers; None when the directory cannot be read.

    A member whose local header is broken, whose data lies past the end of the file or over another
    member's, or whose STORED sizes differ, is returned already marked bad.
    """
    end = _zip_end_record(f, size)
    if end is None:
        return None
    count, cd_size, cd_offset = end
    if cd_size > ZIP_DIRECTORY_MAX_BYTES or cd_offset + cd_size > size:
        return None
    directory = _read_at(f, cd_offset, cd_size)
    if len(directory) != cd_size:
        return None
    members: list[_ZipMember] = []
    pos = 0
    for _ in range(count):
        if directory[pos : pos + 4] != b"PK\x01\x02" or pos + 46 > cd_size:
            return None
        flags, method, _t, _d, crc, csize, usize, n, e, c = struct.unpack_from("<HHHHIIIHHH", directory, pos + 8)
        (offset,) = struct.unpack_from("<I", directory, pos + 42)
        name = directory[pos + 46 : pos + 46 + n].decode("utf-8", "replace")
        extra = directory[pos + 46 + n : pos + 46 + n + e]
        pos += 46 + n + e + c
        if pos > cd_size:
            return None
        usize, csize, offset = _zip64_sizes(extra, usize, csize, offset)
        if flags & 1 or method not in (_ZIP_STORED, _ZIP_DEFLATED):
            continue  # encrypted, or compressed in a way the standard library cannot check in one pass
        header = _read_at(f, offset, 30) if offset + 30 <= size else b""
        if len(header) < 30 or header[:4] != b"PK\x03\x04":
            member = _ZipMember(name, 0, 0, method, crc, usize)
            member.bad = "its local header is missing"
            members.append(member)
            continue
        local_n, local_e = struct.unpack_from("<HH", header, 26)
        start = offset + 30 + local_n + local_e
        member = _ZipMember(name, start, start + csize, method, crc, usize)
        (local_crc,) = struct.unpack_from("<I", header, 14)
        if start + csize > size:
            member.bad = "its data runs past the end of the file"
        elif method == _ZIP_STORED and csize != usize:
            member.bad = "its stored and recorded sizes differ"
        elif not flags & 8 and local_crc != crc:
            member.bad = "its local and central CRC32 differ"
        members.append(member)
    members.sort(key=lambda m: (m.start, m.end))
    reach = 0
    for member in members:
        if member.bad:
            continue
        if member.start < reach:
            member.bad = "its data overlaps another member's"
        reach = max(reach, member.end)
    return members


def _zip_end_record(f: BinaryIO, size: int) -> tuple[int, int, int] | None:
    """(entries, central directory size, its offset) from the end records, as _zip_complete finds them."""
    for tail, _base, pos in _zip_end_candidates(f, size):
        count, cd_size, cd_offset = struct.unpack("<HII", tail[pos + 10 : pos + 20])
        if count != 0xFFFF and cd_size != 0xFFFFFFFF and cd_offset != 0xFFFFFFFF:
            return count, cd_size, cd_offset
        if pos >= 20 and tail[pos - 20 : pos - 16] == b"PK\x06\x07":
            (where,) = struct.unpack("<Q", tail[pos - 12 : pos - 4])
            record64 = _read_at(f, where, 56) if where + 56 <= size else b""
            if len(record64) == 56 and record64[:4] == b"PK\x06\x06":
                count64, cd_size64, cd_offset64 = struct.unpack("<QQQ", record64[32:56])
                return count64, cd_size64, cd_offset64
        return None
    return None


def _zip64_sizes(extra: bytes, usize: int, csize: int, offset: int) -> tuple[int, int, int]:
    """The real sizes and offset of a central directory entry whose 32-bit fields overflowed (ZIP64)."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 1:
            values = iter(struct.unpack_from(f"<{length // 8}Q", extra, pos + 4))
            if usize == 0xFFFFFFFF:
                usize = next(values, usize)
            if csize == 0xFFFFFFFF:
                csize = next(values, csize)
            if offset == 0xFFFFFFFF:
                offset = next(values, offset)
            break
        pos += 4 + length
    return usize, csize, offset


class _CrcPass:
    """The CRCs of one file, computed a buffer at a time by ``compute`` (on either thread, in any order)
    and put together in file order by ``assemble`` (on the reading thread).

    ``compute`` cuts a buffer at block boundaries and at the boundaries of zip members' data, and
    CRCs each piece once from scratch; ``assemble`` joins the pieces into block CRCs and member CRCs
    with ``crc_combine`` (a few microseconds a piece). So each byte is CRC'd once, members included,
    and whichever thread is free can take the next buffer. Inflating a DEFLATED member needs its
    bytes in order: a file with one is computed on the reading thread only (``ordered``).
    """

    def __init__(self, size: int, members: list[_ZipMember] | None) -> None:
        self.block = crc_block_size(size)
        self.all_members = members
        self.members = [m for m in members if not m.bad and m.end > m.start] if members else []
        self.starts = [m.start for m in self.members]
        self.ordered = any(m.inflater is not None for m in self.members)
        self.blocks32: list[int] = []
        self.blocks32c: list[int] = []
        self.cur32 = self.cur32c = self.crc64 = 0
        self.filled = 0  # bytes of the current block assembled so far
        self.offset = 0  # bytes assembled so far

    def compute(self, view: memoryview, offset: int) -> tuple[int, int, list[tuple[int, int, int, Any]]]:
        """(length, CRC64 of the buffer, pieces) for the ``view`` read at ``offset``: each piece
        (length, CRC32, CRC32C, member or None) lies within one block and at most one member."""
        crc64 = _crt.crc64nvme(view) if _crt is not None else 0
        pieces = []
        n, block, members = len(view), self.block, self.members
        pos = 0
        while pos < n:
            at = offset + pos
            stop = min(offset + n, (at // block + 1) * block)
            member = None
            if members:
                i = bisect.bisect_right(self.starts, at) - 1
                if i >= 0 and members[i].end > at:
                    member = members[i]
                    stop = min(stop, member.end)
                elif i + 1 < len(members):
                    stop = min(stop, members[i + 1].start)
            piece = view[pos : stop - offset]
            if member is not None and member.inflater is not None:
                member.inflate(piece)  # only when ordered: on the reading thread, in file order
            pieces.append((stop - at, zlib.crc32(piece), _crt.crc32c(piece) if _crt is not None else 0, member))
            pos = stop - offset
        return n, crc64, pieces

    def assemble(self, computed: tuple[int, int, list[tuple[int, int, int, Any]]]) -> None:
        """Join the next buffer's CRCs (from ``compute``), in file order."""
        n, crc64, pieces = computed
        if _crt is not None:
            self.crc64 = _CRC_MATH["crc64nvme"].combine(self.crc64, crc64, n) if self.offset else crc64
        math32, math32c = _CRC_MATH["crc32"], _CRC_MATH["crc32c"]
        for length, crc32, crc32c, member in pieces:
            if self.filled:
                self.cur32 = math32.combine(self.cur32, crc32, length)
                if _crt is not None:
                    self.cur32c = math32c.combine(self.cur32c, crc32c, length)
            else:
                self.cur32, self.cur32c = crc32, crc32c
            if member is not None and member.inflater is None:
                member.add(crc32, length)
            self.filled += length
            if self.filled == self.block:
                self._end_block()
        self.offset += n

    def _end_block(self) -> None:
        self.blocks32.append(self.cur32)
        self.blocks32c.append(self.cur32c)
        self.cur32 = self.cur32c = 0
        self.filled = 0

    def result(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The wire ``checksums`` object, and the members' verdict ({"checked", "bad"}) when checked."""
        if self.filled:
            self._end_block()
        size = self.offset  # what was read: a file that grew or shrank meanwhile is dropped by the caller
        math32 = _CRC_MATH["crc32"]
        full32 = full32c = 0
        for i, c32 in enumerate(self.blocks32):
            length = min(self.block, size - i * self.block)
            full32 = c32 if not i else math32.combine(full32, c32, length)
            if _crt is not None:
                c32c = self.blocks32c[i]
                full32c = c32c if not i else _CRC_MATH["crc32c"].combine(full32c, c32c, length)
        out: dict[str, Any] = {"crc32": _crc_hex("crc32", full32)}
        if _crt is not None:
            out["crc32c"] = _crc_hex("crc32c", full32c)
            out["crc64nvme"] = _crc_hex("crc64nvme", self.crc64)
        if size > self.block:
            pack = struct.Struct(f">{len(self.blocks32)}I").pack
            blocks = {"size": self.block, "crc32": base64.b64encode(pack(*self.blocks32)).decode("ascii")}
            if _crt is not None:
                blocks["crc32c"] = base64.b64encode(pack(*self.blocks32c)).decode("ascii")
            out["blocks"] = blocks
        verdict = None
        if self.all_members is not None:
            bad = [m.name for m in self.all_members if not m.verdict()]
            verdict = {"checked": len(self.all_members), "bad": bad[:MEMBERS_BAD_MAX]}
        return out, verdict


@dataclasses.dataclass(frozen=True)
class FileChecksums:
    """What one read of a file gave: its sha256, the wire ``checksums`` object, the zip members' verdict
    (``{"checked": n, "bad": [names]}``, None when not checked) and when it was read (epoch seconds)."""

    sha256: str
    checksums: dict[str, Any]
    members: dict[str, Any] | None
    at: float


class _Throttle:
    """Paces reads to ``rate`` bytes a second (scrubbing must not starve training I/O)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.due = 0.0

    def pace(self, n: int) -> None:
        now = time.monotonic()
        self.due = max(self.due, now) + n / self.rate
        if self.due > now:
            time.sleep(self.due - now)


_local = threading.local()
_crc_jobs: queue.SimpleQueue | None = None
_crc_jobs_lock = threading.Lock()


def _crc_worker() -> queue.SimpleQueue:
    """The queue of the CRC worker thread (started on first use). A job is ``(compute, view, offset,
    index, buffer, done)``; the worker puts ``(index, compute(view, offset) or the exception it
    raised, buffer)`` on ``done``. C-level queues: the hand-off is paid every MiB."""
    global _crc_jobs
    with _crc_jobs_lock:
        if _crc_jobs is None:
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_run_crc_jobs, args=(jobs,), name="ckptfleet-crc", daemon=True).start()
            _crc_jobs = jobs
    return _crc_jobs


def _run_crc_jobs(jobs: queue.SimpleQueue) -> None:
    while True:
        compute, view, offset, index, buffer, done = jobs.get()
        try:
            result = compute(view, offset)
        except BaseException as exc:  # handed to the reading thread, which raises it
            result = exc
        done.put((index, result, buffer))


def _buffers() -> list[bytearray]:
    buffers = getattr(_local, "buffers", None)
    if buffers is None:
        buffers = _local.buffers = [bytearray(CHECKSUM_CHUNK) for _ in range(CHECKSUM_BUFFERS)]
    return buffers


class _CrcBatch:
    """Small files' CRCs handed to the worker thread together: one wake-up for several files.

    A batch is sent when it holds ``CHECKSUM_BATCH_FILES`` files or ``CHECKSUM_BATCH_BYTES``, unless the
    worker has not finished the batch sent before (its core is busy): then the reading thread computes
    it, as for a large file's buffers, rather than queue more work for a worker that cannot keep up.
    A batch whose result is needed before it was sent is computed by the reading thread at once.
    """

    __slots__ = ("done", "items", "nbytes", "results")

    def __init__(self) -> None:
        self.items: list[tuple[Callable[..., Any], memoryview]] = []
        self.nbytes = 0
        self.done: queue.SimpleQueue | None = None  # once sent
        self.results: list[Any] | None = None  # once known: per file, its computed CRCs or what was raised

    def add(self, compute: Callable[..., Any], view: memoryview) -> int:
        self.items.append((compute, view))
        self.nbytes += len(view)
        if len(self.items) >= CHECKSUM_BATCH_FILES or self.nbytes >= CHECKSUM_BATCH_BYTES:
            self.send()
        return len(self.items) - 1

    def send(self) -> None:
        if getattr(_local, "batch", None) is self:
            _local.batch = None
        sent: collections.deque[_CrcBatch] | None = getattr(_local, "sent", None)
        if sent is None:
            sent = _local.sent = collections.deque()
        while sent and sent[0].finished():
            sent.popleft()
        if sent:  # the worker is behind: this thread computes the batch rather than wait for it later
            self.results = _crc_batch(self.items, 0)
            return
        self.done = queue.SimpleQueue()
        _crc_worker().put((_crc_batch, self.items, 0, 0, None, self.done))
        sent.append(self)

    def finished(self) -> bool:
        return self.results is not None or (self.done is not None and not self.done.empty())

    def wait(self) -> list[Any]:
        if self.results is None:
            if self.done is None:  # never sent: needed now, so computed here rather than woken and waited for
                if getattr(_local, "batch", None) is self:
                    _local.batch = None
                self.results = _crc_batch(self.items, 0)
            else:
                _, results, _ = self.done.get()
                self.results = results if isinstance(results, list) else [results] * len(self.items)
            self.items = []  # the files' bytes are not needed any more
        return self.results


def _crc_batch(items: list[tuple[Callable[..., Any], memoryview]], offset: int) -> list[Any]:
    """Each file's computed CRCs (``_CrcPass.compute`` of all its bytes), or what computing them raised."""
    results: list[Any] = []
    for compute, view in items:
        try:
            results.append(compute(view, offset))
        except BaseException as exc:  # raised by that file's result() on the reading thread
            results.append(exc)
    return results


class _PendingSums:
    """The checksums of a small file read whole (``checksum_file(later=True)``): its sha256 taken on the
    reading thread, its CRCs under way (see ``_CrcBatch``). ``ready()`` says whether they are done;
    ``result()`` waits for them and gives the FileChecksums, or raises what computing them raised."""

    __slots__ = ("at", "batch", "crcs", "index", "sha256")

    def __init__(self, sha256: str, crcs: _CrcPass, data: bytes) -> None:
        self.sha256 = sha256
        self.crcs = crcs
        self.at = round(time.time(), 3)  # when it was read
        batch = getattr(_local, "batch", None)
        if batch is None:
            batch = _local.batch = _CrcBatch()
        self.batch = batch
        self.index = batch.add(crcs.compute, memoryview(data))

    def ready(self) -> bool:
        return self.batch.finished()

    def result(self) -> FileChecksums:
        computed = self.batch.wait()[self.index]
        if isinstance(computed, BaseException):
            raise computed
        self.crcs.assemble(computed)
        checksums, verdict = self.crcs.result()
        return FileChecksums(self.sha256, checksums, verdict, self.at)


def _read_whole(f: _ReadInto, size: int, limit: int) -> tuple[bytes, bool]:
    """(everything left in ``f``, True) when that is at most ``limit`` bytes; else (the first bytes of it,
    more than ``limit``, False). ``size`` (the size listed) sizes the first read; the second says EOF."""
    pieces: list[bytes] = []
    got = 0
    while got <= limit:
        want = size + 1 - got if got < size else 1 if got == size else CHECKSUM_CHUNK
        piece = f.read(min(want, limit + 1 - got))
        if not piece:
            return (pieces[0] if len(pieces) == 1 else b"".join(pieces)), True
        pieces.append(piece)
        got += len(piece)
    return b"".join(pieces), False


def checksum_file(
    f: _ReadInto,
    size: int,
    *,
    members: list[_ZipMember] | None = None,
    throttle: _Throttle | None = None,
    later: bool = False,
) -> FileChecksums | _PendingSums:
    """sha256 and the CRCs of ``CRC_ALGORITHMS`` (per block and whole) of everything left in ``f``, in one read.

    ``size`` is the file's size when listed (it sets the block size). hashlib, zlib and awscrt
    release the GIL on large buffers, so a worker thread CRCs one buffer while this thread reads the
    next and feeds sha256; when the worker is behind (its core is busy) this thread CRCs the buffer
    itself rather than wait. With a second core free the pass costs little more than sha256 alone;
    on a busy machine, what its CPU does (sha256 + crc32, about 1.7x). Memory: three 1 MiB buffers.
    ``members`` (from ``zip_members``) are checked from the same bytes.

    A file below ``CHECKSUM_INLINE_BYTES`` is too short for that: waiting for the worker to wake up
    costs more than its CRCs. With ``later`` (a caller that can go on meanwhile, see ``_Pipeline``)
    such a file, with no members to check and no throttle, is read whole into its own bytes, its
    sha256 taken here, and a ``_PendingSums`` returned while its CRCs are left to the worker with
    the next few such files (``_CrcBatch``); without ``later``, or when it is under
    ``CHECKSUM_DEFER_BYTES``, this thread CRCs it.
    """
    crcs = _CrcPass(size, members)
    sha = hashlib.sha256()
    offset = 0
    if later and size < CHECKSUM_INLINE_BYTES and members is None and throttle is None:
        data, whole = _read_whole(f, size, CHECKSUM_INLINE_BYTES)
        sha.update(data)
        if whole and len(data) >= CHECKSUM_DEFER_BYTES:
            return _PendingSums(sha.hexdigest(), crcs, data)
        # Too short to be worth the worker, or it grew past the limit meanwhile: CRC'd here, any rest as below.
        crcs.assemble(crcs.compute(memoryview(data), 0))
        offset = len(data)
        if whole:
            checksums, verdict = crcs.result()
            return FileChecksums(sha.hexdigest(), checksums, verdict, round(time.time(), 3))
    # A small file's CRCs are computed on this thread: a hand-off to the worker costs more than they do.
    jobs = _crc_worker() if size >= CHECKSUM_INLINE_BYTES and not crcs.ordered else None
    done: queue.SimpleQueue = queue.SimpleQueue()
    free = list(_buffers())
    most = len(free) - 1  # buffers the worker may hold: one is always left for this thread to read into
    in_flight = 0
    computed: dict[int, Any] = {}  # by buffer number, until assembled in order
    failure: BaseException | None = None
    read = assembled = 0
    try:
        while True:
            # Take back what the worker finished, without waiting (a buffer is always left).
            while in_flight and (not free or not done.empty()):
                index, result, buffer = done.get()
                in_flight -= 1
                free.append(buffer)
                if isinstance(result, BaseException):
                    raise result
                computed[index] = result
            buffer = free.pop()
            n = f.readinto(buffer)
            if not n:
                free.append(buffer)
                break
            view = memoryview(buffer)[:n]
            if jobs is not None and in_flight < most:
                jobs.put((crcs.compute, view, offset, read, buffer, done))
                in_flight += 1
                sha.update(view)
            else:
                # The worker is behind (its core is busy): this thread takes the buffer itself
                # rather than wait for it, so a busy machine costs the CPU, not a stall per MiB.
                sha.update(view)
                computed[read] = crcs.compute(view, offset)
                free.append(buffer)
            read += 1
            offset += n
            while assembled in computed:
                crcs.assemble(computed.pop(assembled))
                assembled += 1
            if throttle is not None:
                throttle.pace(n)
    except BaseException as exc:
        failure = exc
    finally:
        # Never leave while the worker may still read a buffer the next file will fill.
        while in_flight:
            index, result, buffer = done.get()
            in_flight -= 1
            if isinstance(result, BaseException):
                failure = failure or result
            computed[index] = result
    if failure is not None:
        raise failure
    while assembled in computed:
        crcs.assemble(computed.pop(assembled))
        assembled += 1
    checksums, verdict = crcs.result()
    return FileChecksums(sha.hexdigest(), checksums, verdict, round(time.time(), 3))


def sha256_file(f: _ReadInto) -> str:
    """Lowercase hex sha256 of everything left in ``f``, read in 1 MiB blocks (the pass before CRCs,
    kept as the baseline bench/agent_checksum_bench.py measures the new one against)."""
    digest = hashlib.sha256()
    buffer = bytearray(HASH_BLOCK)
    view = memoryview(buffer)
    while True:
        n = f.readinto(buffer)
        if not n:
            return digest.hexdigest()
        digest.update(view[:n])


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


class _ScrubPlan:
    """Which files of a root are re-read this run: the oldest-hashed, up to a share of the root's bytes."""

    def __init__(self, oldest: float, budget: int, rate: float) -> None:
        self.oldest = oldest  # files hashed at or before this are due
        self.left = budget
        self.throttle = _Throttle(rate)

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
            raise AgentError(f"cannot use checksum cache {_printable(self.path)}: {exc}", fatal=True) from None

    @staticmethod
    def _key(st: os.stat_result) -> tuple[int, int, int, int]:
        return (_signed64(st.st_dev), _signed64(st.st_ino), st.st_size, st.st_mtime_ns)

    @contextlib.contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            # A locked or full cache is not worth silently re-hashing petabytes: stop and say so.
            raise AgentError(f"checksum cache {_printable(self.path)}: {exc}", fatal=True) from None

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

    def begin_walk(self, root: str) -> _ScrubPlan | None:
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
        return _ScrubPlan(oldest, budget, self.scrub_rate)

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


def _checksum(
    path: str,
    st: os.stat_result,
    cache: ChecksumCache | None,
    warn: Warn,
    *,
    zip_check: bool = False,
    root: str | None = None,
    scrub: _ScrubPlan | None = None,
    later: bool = False,
) -> FileChecksums | _PendingChecksums | None:
    """The checksums of the file at ``path`` as listed (``st``): from the cache when it holds them all
    (unless the file is due for a scrub), else read once. None when it cannot be read or changed meanwhile.

    With ``later``, a small file's CRCs may still be under way when it has been read: then a
    ``_PendingChecksums`` is returned, whose ``finish`` does the rest once they are done."""
    cached = cache.get(st, root=root) if cache is not None else None
    usable = cached is not None and cached.covers(zip_check=zip_check)
    scrubbing = usable and scrub is not None and scrub.due(cached.hashed_at if cached else None, st.st_size)
    if cached is not None and usable and not scrubbing:
        return FileChecksums(cached.sha256, cached.checksums or {}, cached.members, cached.hashed_at or 0.0)
    try:
        with _open_regular(path) as f:
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
    except (OSError, _FactsError) as exc:
        warn(f"{_printable(path)}: no checksum sent: {_os_reason(exc)}")
        return None
    if isinstance(sums, _PendingSums):
        return _PendingChecksums(sums, (path, st, cache, cached, before, after, zip_check, members, root))
    return _checked(sums, path, st, cache, cached, before, after, zip_check, members, root, warn)


class _PendingChecksums:
    """``_checksum`` of a file read whose CRCs are under way: ``finish`` waits for them and does the rest
    (the change check, the warnings, the cache), as ``_checksum`` would have."""

    __slots__ = ("context", "sums")

    def __init__(self, sums: _PendingSums, context: tuple[Any, ...]) -> None:
        self.sums = sums
        self.context = context  # the arguments of _checked but the first and the last

    def ready(self) -> bool:
        return self.sums.ready()

    def finish(self, warn: Warn) -> FileChecksums | None:
        try:
            sums = self.sums.result()
        except (OSError, _FactsError) as exc:  # as checksum_file's would be in _checksum
            warn(f"{_printable(self.context[0])}: no checksum sent: {_os_reason(exc)}")
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
    members: list[_ZipMember] | None,
    root: str | None,
    warn: Warn,
) -> FileChecksums | None:
    """The end of ``_checksum``, once the file was read (``before`` and ``after`` it) and its checksums are done."""
    listed = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if any((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns) != listed for s in (before, after)):
        warn(f"{_printable(path)}: no checksum sent: the file changed while it was read")
        return None
    if zip_check and members is None:
        sums = dataclasses.replace(sums, members={})  # tried: the central directory cannot be read
    if cached is not None and _content_differs(cached, sums):
        warn(
            f"{_printable(path)}: content changed without a new mtime: bit rot or an in-place write "
            f"(sha256 was {cached.sha256}, is {sums.sha256}); the new checksums are sent"
        )
    if cache is not None:
        cache.put(st, sums, root=root)
    return sums


def _content_differs(cached: CachedChecksums, sums: FileChecksums) -> bool:
    if cached.sha256 != sums.sha256:
        return True
    old = cached.checksums or {}
    return any(old.get(algo) not in (None, sums.checksums.get(algo)) for algo in _CRC_PARAMS)


# --- talking to the server ------------------------------------------------------------------------


def _os_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return _one_line(getattr(exc, "verify_message", None) or exc.reason or exc)
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return _one_line(exc) or type(exc).__name__


def _connection(
    url: urllib.parse.SplitResult, timeout: float
) -> tuple[http.client.HTTPConnection, str, list[tuple[str, str]]]:
    """A connection for ``url``, through the proxy the environment names if any; the request target;
    and the headers the proxy needs on each request."""
    host = url.hostname or ""
    port = url.port
    target = (url.path or "/") + (f"?{url.query}" if url.query else "")
    proxy_url = None if urllib.request.proxy_bypass(host) else urllib.request.getproxies().get(url.scheme)
    if not proxy_url:
        if url.scheme == "https":
            return (
                http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context()),
                target,
                [],
            )
        return http.client.HTTPConnection(host, port, timeout=timeout), target, []
    proxy = urllib.parse.urlsplit(proxy_url if "://" in proxy_url else f"http://{proxy_url}")
    auth: list[tuple[str, str]] = []
    if proxy.username:
        credentials = f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password or '')}"
        auth.append(("Proxy-Authorization", "Basic " + base64.b64encode(credentials.encode()).decode()))
    if url.scheme == "https":
        conn = http.client.HTTPSConnection(
            proxy.hostname or "", proxy.port or 80, timeout=timeout, context=ssl.create_default_context()
        )
        conn.set_tunnel(host, port or 443, headers=dict(auth))
        return conn, target, []
    # A plain-HTTP proxy takes the absolute URL as the request target.
    return (
        http.client.HTTPConnection(proxy.hostname or "", proxy.port or 80, timeout=timeout),
        url.geturl(),
        auth,
    )


def _request(
    method: str,
    url: str,
    token: str,
    *,
    timeout: float,
    body: BinaryIO | None = None,
    length: int = 0,
    headers: Iterable[tuple[str, str]] = (),
) -> tuple[int, str, bytes]:
    """Send one request; return (status, reason, up to 1 MiB of the answer). Network trouble -> AgentError."""
    parts = urllib.parse.urlsplit(url)
    where = f"{parts.scheme}://{parts.netloc}"
    try:
        conn, target, proxy_headers = _connection(parts, timeout)
    except ValueError as exc:
        raise AgentError(f"bad server URL {url!r}: {exc}", fatal=True) from None
    try:
        try:
            conn.putrequest(method, target, skip_accept_encoding=True)
            conn.putheader("Authorization", f"Bearer {token}")
            conn.putheader("User-Agent", AGENT)
            conn.putheader("Accept", "application/json")
            for name, value in [*proxy_headers, *headers]:
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(length))
            conn.endheaders()
        except (OSError, http.client.HTTPException) as exc:
            raise AgentError(f"cannot reach server {where}: {_os_reason(exc)}", fatal=True) from None
        sent_error: BaseException | None = None
        if body is not None:
            try:
                while True:
                    block = body.read(HASH_BLOCK)
                    if not block:
                        break
                    conn.send(block)
            except OSError as exc:
                # The server may refuse after reading the header and hang up; its answer, if it got
                # through, explains more than the broken pipe does.
                sent_error = exc
        try:
            response = conn.getresponse()
            answer = response.read(1024 * 1024)
        except (OSError, http.client.HTTPException) as exc:
            cause = sent_error or exc
            raise AgentError(f"connection to server {where} failed: {_os_reason(cause)}", fatal=True) from None
        return response.status, response.reason, answer
    finally:
        conn.close()


def _answer_json(answer: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(answer.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _refusal(status: int, reason: str, answer: bytes) -> str:
    """One line from an error answer: the server's JSON ``detail`` (or ``error``) when it sent one."""
    message = f"server answered {status} {reason}".rstrip()
    doc = _answer_json(answer)
    if doc:
        detail = doc.get("detail") or doc.get("error")
        if detail is not None and not isinstance(detail, str):
            detail = json.dumps(detail)
        if detail:
            message += f": {detail}"
        if doc.get("fields"):
            message += f" {json.dumps(doc['fields'])}"
    return _one_line(message, 500)


def upload_inventory(server: str, token: str, body: BinaryIO, length: int, *, timeout: float = 60.0) -> dict[str, Any]:
    """POST a gzip NDJSON inventory of ``length`` bytes, streamed from ``body``; return the 202 answer."""
    url = server.rstrip("/") + INVENTORIES_PATH
    status, reason, answer = _request(
        "POST",
        url,
        token,
        timeout=timeout,
        body=body,
        length=length,
        headers=[("Content-Type", "application/x-ndjson"), ("Content-Encoding", "gzip")],
    )
    if status != 202:
        raise AgentError(_refusal(status, reason, answer), fatal=status == 401)
    doc = _answer_json(answer)
    if doc is None or "id" not in doc:
        raise AgentError(f"server answered 202 without an inventory id: {_one_line(answer[:200])}")
    return doc


def wait_for_inventory(
    server: str, token: str, url: str, *, timeout: float = 60.0, wait_timeout: float = 1800.0
) -> dict[str, Any]:
    """Poll an inventory until it is applied or failed; return its last state."""
    poll = urllib.parse.urljoin(server.rstrip("/") + INVENTORIES_PATH, url)
    deadline = time.monotonic() + wait_timeout
    delay = 0.5
    while True:
        status, reason, answer = _request("GET", poll, token, timeout=timeout)
        if status != 200:
            raise AgentError(_refusal(status, reason, answer), fatal=status == 401)
        doc = _answer_json(answer) or {}
        if doc.get("status") in ("applied", "failed"):
            return doc
        if time.monotonic() + delay > deadline:
            raise AgentError(f"inventory still {doc.get('status')!r} after {wait_timeout:g} s; see {poll}")
        time.sleep(delay)
        delay = min(delay * 2, 5.0)


def _human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            break
    return f"{value:.1f} {unit}"


def _spool_error(exc: OSError) -> AgentError:
    return AgentError(
        f"cannot write the inventory to a temporary file in {tempfile.gettempdir()} "
        f"(point TMPDIR elsewhere?): {_os_reason(exc)}",
        fatal=True,
    )


def write_inventory(
    out: IO[bytes],
    root: str,
    host: str,
    *,
    checksums: bool = False,
    cache: ChecksumCache | None = None,
    warn: Warn | None = None,
    allow_empty: bool = False,
) -> dict[str, Any]:
    """Write one whole inventory of ``root`` to ``out`` as the gzip NDJSON body; return the trailer."""
    lines = inventory_lines(root, host, checksums=checksums, cache=cache, warn=warn, allow_empty=allow_empty)
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=6, mtime=0) as gz:
        return _write_lines(lines, gz)


def _send_root(args: argparse.Namespace, root: str, server: str, token: str, cache: ChecksumCache | None) -> None:
    label = f"{args.host}:{root}"
    try:
        try:
            # On disk, not in memory: a root of millions of files makes a body of hundreds of MB.
            spool = tempfile.TemporaryFile(prefix="ckptfleet-agent-")
        except OSError as exc:
            raise _spool_error(exc) from None
        with spool:
            try:
                trailer = write_inventory(
                    spool, root, args.host, checksums=args.checksums, cache=cache, allow_empty=args.allow_empty
                )
                length = spool.tell()
                spool.seek(0)
            except OSError as exc:
                raise _spool_error(exc) from None
            answer = upload_inventory(server, token, spool, length, timeout=args.timeout)
    except AgentError as exc:
        raise AgentError(f"{label}: {exc}", fatal=exc.fatal) from None
    print(
        f"{label}: {trailer['files']} files, {_human_bytes(trailer['bytes'])} sent as inventory "
        f"{answer['id']} ({answer.get('status', '?')})",
        flush=True,
    )
    if not args.wait:
        return
    url = answer.get("url") or f"{INVENTORIES_PATH}{answer['id']}/"
    try:
        state = wait_for_inventory(server, token, url, timeout=args.timeout, wait_timeout=args.wait_timeout)
    except AgentError as exc:
        raise AgentError(f"{label}: inventory {answer['id']}: {exc}", fatal=exc.fatal) from None
    if state["status"] == "failed":
        where = f" at line {state['error_line']}" if state.get("error_line") else ""
        raise AgentError(f"{label}: inventory {answer['id']} failed{where}: {_one_line(state.get('error'))}")
    counts = [
        f"{state[key]} {word}"
        for key, word in (
            ("files_added", "added"),
            ("files_changed", "changed"),
            ("files_gone", "gone"),
            ("checkpoints_found", "checkpoints found"),
        )
        if state.get(key) is not None
    ]
    print(
        f"{label}: inventory {answer['id']} applied" + (f": {', '.join(counts)}" if counts else ""),
        flush=True,
    )


# --- deletions: the files the server scheduled for deletion on this host --------------------------


def delete_file(root: str, rel: str, size: int, mtime: float) -> tuple[str, str]:
    """Delete one frozen file below ``root`` if it is still the file that was scheduled.

    Returns (result, detail): ("deleted", ""), ("skipped", "missing: ..."), ("skipped", "changed: ...")
    when its size or mtime differ (it was written again since), ("skipped", "refused: ...") for a path
    that is not a plain relative path below the root or that leads through a symlink, or
    ("failed", why) when the operating system refused. Exactly one regular file is unlinked, never
    a directory: each directory on the way is opened without following symlinks and the file is
    unlinked relative to its directory, so no symlink swapped in meanwhile leads outside the root.
    """
    if path_problem(rel):
        return "skipped", "refused: not a plain relative path below the root"
    parts = rel.split("/")
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        return "failed", f"cannot open the root: {_os_reason(exc)}"
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, flags | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
            except FileNotFoundError:
                return "skipped", "missing: its directory is gone"
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    return "skipped", f"refused: {_printable(part)} on its path is no longer a plain directory"
                return "failed", f"cannot open its directory: {_os_reason(exc)}"
            os.close(fd)
            fd = child
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return "skipped", "missing: no such file"
        except OSError as exc:
            return "failed", f"cannot stat it: {_os_reason(exc)}"
        if not stat.S_ISREG(st.st_mode):
            return "skipped", "changed: no longer a regular file"
        if st.st_size != size:
            return "skipped", f"changed: its size is {st.st_size} bytes, scheduled at {size}"
        if abs(st.st_mtime_ns - round(mtime * 1e9)) > MTIME_TOLERANCE_NS:
            return "skipped", "changed: modified since it was scheduled"
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            return "skipped", "missing: no such file"
        except OSError as exc:
            return "failed", f"cannot delete it: {_os_reason(exc)}"
        return "deleted", ""
    finally:
        os.close(fd)


def _open_dirs(root: str, parts: list[str], *, create: bool = False) -> int:
    """Open the directory ``root/parts...`` without following any symlink (creating missing ones when
    ``create``); returns its fd. Raises FileNotFoundError, or OSError (ELOOP/ENOTDIR for a symlink or file)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    fd = os.open(root, flags)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            child = os.open(part, flags | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _move_file(root: str, source: str, target: str, *, size: int, mtime: float | None) -> tuple[str, str]:
    """Rename one regular file below ``root`` from ``source`` to ``target`` (both plain relative paths), never
    over an existing file; with ``mtime`` the file must still have the scheduled size and mtime."""
    if path_problem(source) or path_problem(target):
        return "skipped", "refused: not a plain relative path below the root"
    src_parts, dst_parts = source.split("/"), target.split("/")
    try:
        src_fd = _open_dirs(root, src_parts[:-1])
    except FileNotFoundError:
        return "skipped", "missing: its directory is gone"
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return "skipped", "refused: a directory on its path is no longer a plain directory"
        return "failed", f"cannot open its directory: {_os_reason(exc)}"
    try:
        try:
            st = os.stat(src_parts[-1], dir_fd=src_fd, follow_symlinks=False)
        except FileNotFoundError:
            return "skipped", "missing: no such file"
        if not stat.S_ISREG(st.st_mode):
            return "skipped", "changed: no longer a regular file"
        if st.st_size != size:
            return "skipped", f"changed: its size is {st.st_size} bytes, scheduled at {size}"
        if mtime is not None and abs(st.st_mtime_ns - round(mtime * 1e9)) > MTIME_TOLERANCE_NS:
            return "skipped", "changed: modified since it was scheduled"
        try:
            dst_fd = _open_dirs(root, dst_parts[:-1], create=True)
        except OSError as exc:
            return "failed", f"cannot make its target directory: {_os_reason(exc)}"
        try:
            try:
                os.stat(dst_parts[-1], dir_fd=dst_fd, follow_symlinks=False)
                return "skipped", "refused: something else is at that path now"
            except FileNotFoundError:
                pass
            try:
                os.rename(src_parts[-1], dst_parts[-1], src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            except OSError as exc:
                return "failed", f"cannot move it: {_os_reason(exc)}"
        finally:
            os.close(dst_fd)
        return "moved", ""
    except OSError as exc:
        return "failed", f"cannot stat it: {_os_reason(exc)}"
    finally:
        os.close(src_fd)


def trash_file(root: str, rel: str, trash_rel: str, size: int, mtime: float) -> tuple[str, str]:
    """Move one frozen file into the root's trash (a rename on the same filesystem) if it is still the file
    that was scheduled: ("trashed", ""), or ("skipped"/"failed", why) as ``delete_file`` says them."""
    if not trash_rel.startswith(TRASH_DIR + "/"):
        return "skipped", "refused: the trash path is not in the root's trash"
    result, detail = _move_file(root, rel, trash_rel, size=size, mtime=mtime)
    return ("trashed", "") if result == "moved" else (result, detail)


def restore_file(root: str, rel: str, trash_rel: str, size: int) -> tuple[str, str]:
    """Move a trashed file back where it was, refusing when something else is at that path now."""
    if not trash_rel.startswith(TRASH_DIR + "/"):
        return "skipped", "refused: the trash path is not in the root's trash"
    result, detail = _move_file(root, trash_rel, rel, size=size, mtime=None)
    return ("restored", "") if result == "moved" else (result, detail)


def purge_file(root: str, trash_rel: str, size: int, mtime: float) -> tuple[str, str]:
    """Delete a trashed file for good (its window ended): "purged", or "skipped" when it is gone already."""
    if not trash_rel.startswith(TRASH_DIR + "/"):
        return "skipped", "refused: the trash path is not in the root's trash"
    result, detail = delete_file(root, trash_rel, size, mtime)
    if result == "deleted":
        return "purged", ""
    return ("skipped", f"purged already: {detail}") if detail.startswith("missing") else (result, detail)


def do_deletion_item(root: str, item: dict[str, Any]) -> tuple[str, str]:
    """Carry out one item of the server's deletion work by its ``action`` (delete when absent: wire format 1)."""
    action = item.get("action", "delete")
    size, mtime = int(item["size"]), float(item["mtime"])
    if action == "delete":
        return delete_file(root, item["path"], size, mtime)
    trash_rel = item.get("trash_path")
    if not isinstance(trash_rel, str):
        return "skipped", "refused: the server sent no trash path"
    if action == "trash":
        return trash_file(root, item["path"], trash_rel, size, mtime)
    if action == "purge":
        return purge_file(root, trash_rel, size, mtime)
    if action == "restore":
        return restore_file(root, item["path"], trash_rel, size)
    return "skipped", f"refused: unknown action {_printable(str(action))[:40]}"


def _fetch_work(
    path: str, server: str, token: str, root: str, *, timeout: float, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    """GET the server's work for this host below ``root`` (deletions, pulls): a document with a list of items."""
    url = server.rstrip("/") + path + "?" + urllib.parse.urlencode({"root": root, **(extra or {})})
    status, reason, answer = _request("GET", url, token, timeout=timeout)
    if status != 200:
        raise AgentError(_refusal(status, reason, answer), fatal=status in (401, 403))
    doc = _answer_json(answer)
    if doc is None or not isinstance(doc.get("items"), list):
        raise AgentError(f"server answered without a list of items: {_one_line(answer[:200])}")
    return doc


def _post_json(path: str, server: str, token: str, doc: dict[str, Any], *, timeout: float, ok=(200,)) -> dict:
    """POST ``doc`` as JSON to the server's ``path``; the answer's JSON, or AgentError naming the refusal."""
    body = json.dumps(doc).encode()
    status, reason, answer = _request(
        "POST",
        server.rstrip("/") + path,
        token,
        timeout=timeout,
        body=io.BytesIO(body),
        length=len(body),
        headers=[("Content-Type", "application/json")],
    )
    if status not in ok:
        raise AgentError(_refusal(status, reason, answer), fatal=status in (401, 403))
    return _answer_json(answer) or {}


def _report_work(path: str, server: str, token: str, results: list[dict[str, Any]], *, timeout: float) -> dict:
    """POST what became of each item fetched from ``path``."""
    return _post_json(path, server, token, {"results": results}, timeout=timeout)


def fetch_deletions(server: str, token: str, root: str, *, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The pending files of this host's running deletion jobs below ``root``."""
    return _fetch_work(DELETIONS_PATH, server, token, root, timeout=timeout, extra={"can": "trash"})["items"]


def report_deletions(server: str, token: str, results: list[dict[str, Any]], *, timeout: float = 60.0) -> dict:
    return _report_work(DELETIONS_PATH, server, token, results, timeout=timeout)


def _delete_root(args: argparse.Namespace, root: str, server: str, token: str) -> bool:
    """Delete this root's scheduled files and report each; True when none failed."""
    label = f"{args.host}:{root}"
    tried: set[int | None] = set()
    counts: collections.Counter[str] = collections.Counter()
    try:
        while True:
            items = [i for i in fetch_deletions(server, token, root, timeout=args.timeout) if i.get("id") not in tried]
            if not items:
                break
            results = []
            for item in items:
                tried.add(item.get("id"))
                if item.get("root") != root:
                    result, detail = "skipped", "refused: the item is not below this root"
                else:
                    try:
                        result, detail = do_deletion_item(root, item)
                    except (KeyError, TypeError, ValueError):
                        result, detail = "skipped", "refused: the server sent an incomplete item"
                counts[result] += 1
                if result not in ("deleted", "trashed", "purged", "restored"):
                    _stderr_warn(f"{label}: {_printable(str(item.get('path')))}: {result}: {detail}")
                results.append({"id": item.get("id"), "result": result, "detail": detail})
            report_deletions(server, token, results, timeout=args.timeout)
    except AgentError as exc:
        raise AgentError(f"{label}: {exc}", fatal=exc.fatal) from None
    print(
        f"{label}: {counts['deleted']} deleted, "
        + "".join(f"{counts[k]} {word}, " for k, word in _TRASH_WORDS if counts[k])
        + f"{counts['skipped']} skipped, {counts['failed']} failed",
        flush=True,
    )
    return counts["failed"] == 0


# --- pulls: the files the server asked this host to fetch (promotions to its roots) --------------


class _Later(Exception):
    """Trouble that may pass (the network, the store's 5xx, an expired URL): the file is left for the next run."""


class _Failed(Exception):
    """The file cannot be pulled as it was asked for: it is reported failed, with this one-line reason."""


def _md5() -> Any:
    try:
        return hashlib.md5(usedforsecurity=False)
    except TypeError:  # Python 3.8
        return hashlib.md5()  # noqa: S324  # nosec B324 - compared with an ETag, not used for security


def _strip_etag(value: object) -> str:
    return str(value or "").strip().strip('"')


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _store_refusal(exc: urllib.error.HTTPError) -> str:
    """The store's error in one line: its status and, from S3's XML body, its code and message."""
    try:
        body = exc.read(8192).decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        body = ""
    finally:
        exc.close()
    code = re.search(r"<Code>([^<]{1,100})</Code>", body)
    message = re.search(r"<Message>([^<]{1,300})</Message>", body)
    text = f"the store answered {exc.code} {exc.reason}".rstrip()
    if code:
        text += f": {code.group(1)}"
    if message:
        text += f" ({message.group(1)})"
    return _one_line(text)


def _download(url: str, out: BinaryIO, *, size: int, etag: str, timeout: float) -> tuple[int, str, str, bool]:
    """Stream one presigned GET into ``out``; return (bytes, sha256 hex, MD5 hex, encrypted with KMS or SSE-C).

    Raises _Later for trouble that may pass, _Failed when the store says the object is not the frozen one
    (another ETag, another length, more bytes than frozen) or refuses for good. An OSError is ``out``'s.
    """
    # pull_file lets only http(s) URLs through.
    request = urllib.request.Request(url, headers={"User-Agent": AGENT})  # noqa: S310
    try:
        response = urllib.request.urlopen(request, timeout=timeout)  # noqa: S310  # nosec B310 - http(s) only, checked above
    except urllib.error.HTTPError as exc:
        reason = _store_refusal(exc)
        if exc.code in (408, 429) or exc.code >= 500 or (exc.code == 403 and "expired" in reason.lower()):
            raise _Later(reason) from None
        raise _Failed(reason) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        cause = exc.reason if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException) else exc
        raise _Later(f"cannot reach the store: {_os_reason(cause)}") from None
    with response:
        theirs = _strip_etag(response.headers.get("ETag"))
        if etag and theirs and theirs != etag:
            raise _Failed(f"the store's object has ETag {theirs}, the promotion froze {etag}: it changed since")
        length = response.headers.get("Content-Length")
        if length is not None and length.strip().isdigit() and int(length) != size:
            raise _Failed(f"the store's object has {int(length)} bytes, the promotion froze {size}: it changed since")
        sse = (response.headers.get("x-amz-server-side-encryption") or "").lower()
        encrypted = sse.startswith("aws:kms") or bool(
            response.headers.get("x-amz-server-side-encryption-customer-algorithm")
        )
        sha, md5, n = hashlib.sha256(), _md5(), 0
        while True:
            try:
                block = response.read(HASH_BLOCK)
            except (OSError, http.client.HTTPException) as exc:
                raise _Later(f"the download broke off after {n} bytes: {_os_reason(exc)}") from None
            if not block:
                break
            n += len(block)
            if n > size:
                raise _Failed(f"the store sent more than the {size} bytes the promotion froze")
            sha.update(block)
            md5.update(block)
            out.write(block)
    return n, sha.hexdigest(), md5.hexdigest(), encrypted


def _same_file(fd: int, name: str, st: os.stat_result, size: int, etag: str, sha256: str) -> tuple[str, str, dict]:
    """What to say about a file already at the target: identical (done) or anything else (never replaced)."""
    if not stat.S_ISREG(st.st_mode):
        return "skipped", "refused: something other than a regular file is at the target; never replaced", {}
    if st.st_size != size:
        return (
            "skipped",
            f"refused: another file ({st.st_size} bytes, not {size}) is at the target; never overwritten",
            {},
        )
    md5_known = bool(_SINGLE_PART_ETAG.match(etag))
    if not sha256 and not md5_known:
        return (
            "skipped",
            "refused: a file of the same size is at the target, and with no sha256 or single-part ETag to compare "
            "it cannot be shown identical; never overwritten",
            {},
        )
    try:
        f = os.fdopen(os.open(name, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd), "rb")
    except OSError as exc:
        return "failed", f"cannot read the file at the target: {_os_reason(exc)}", {}
    sha, md5 = hashlib.sha256(), _md5()
    with f:
        try:
            for block in iter(lambda: f.read(HASH_BLOCK), b""):
                sha.update(block)
                md5.update(block)
        except OSError as exc:
            return "failed", f"cannot read the file at the target: {_os_reason(exc)}", {}
    same = sha.hexdigest() == sha256 if sha256 else md5.hexdigest() == etag
    if not same:
        return (
            "skipped",
            "refused: another file of the same size is at the target (its checksum differs); never overwritten",
            {},
        )
    how = "sha256" if sha256 else "MD5 = ETag"
    return "pulled", f"already at the target, identical ({how} checked)", {"size": size, "sha256": sha.hexdigest()}


def _place(fd: int, tmp: str, name: str) -> str:
    """Give the checked temporary file its name, never replacing anything; "" when done, else why not.

    A hard link fails when the name exists, so nothing that appeared meanwhile is lost. File systems
    without hard links get a check then a rename (a writer racing in between would be replaced).
    """
    try:
        os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except FileExistsError:
        return "refused: another file appeared at the target while pulling; never overwritten"
    except OSError as exc:
        if exc.errno not in {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}:
            raise
        if _lstat(name, fd) is not None:
            return "refused: another file appeared at the target while pulling; never overwritten"
        os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        return ""
    with contextlib.suppress(OSError):
        os.unlink(tmp, dir_fd=fd)
    return ""


def pull_file(
    root: str, item: dict[str, Any], *, timeout: float = 60.0, dry_run: bool = False
) -> tuple[str, str, dict]:
    """Pull one file the server asked for into ``root``: downloaded, checked, never replacing anything.

    Returns (result, detail, measured). "pulled" when the file is now at its target with the frozen
    content (downloaded, or found there already identical), measured being {"size", "sha256"};
    "skipped" ("refused: ...") when the path is not a plain relative path below the root or leads
    through a symlink, or another file is at the target; "failed" when what arrived does not match
    (size, sha256 when known, the MD5 of a single-part ETag; a multipart ETag ``...-N`` is no MD5 and
    is not compared) or the operating system refused. A failed download leaves nothing behind: it is
    written to ``.ckptfleet-pull-*.tmp`` beside its target and only linked to its name, after fsync,
    when it checks out. With ``dry_run`` nothing is written and a download is "would pull".
    Raises _Later for trouble that may pass.
    """
    try:
        rel, url, target = item["path"], item["url"], item["target"]
        size = item["size"]
        etag = _strip_etag(item.get("etag"))
        sha256 = item.get("sha256") or ""
    except (KeyError, TypeError):
        return "skipped", "refused: the server sent an incomplete item", {}
    if not all(isinstance(v, str) for v in (rel, url, target, sha256)) or not isinstance(size, int) or size < 0:
        return "skipped", "refused: the server sent an incomplete item", {}
    if sha256 and not SHA256_HEX.match(sha256):
        return "skipped", "refused: the server sent a malformed sha256", {}
    if path_problem(rel):
        return "skipped", "refused: not a plain relative path below the root", {}
    parts = rel.split("/")
    if target != root.rstrip("/") + "/" + rel:
        return "skipped", "refused: the target is not the path below this root", {}
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return "skipped", "refused: the download URL is not http(s)", {}
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        return "failed", f"cannot open the root: {_os_reason(exc)}", {}
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, flags | nofollow, dir_fd=fd)
            except FileNotFoundError:
                if dry_run:
                    return "would pull", f"{_human_bytes(size)} from {item.get('source') or 'the store'}", {}
                try:
                    os.mkdir(part, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc:
                    return "failed", f"cannot make the directory {_printable(part)}: {_os_reason(exc)}", {}
                try:
                    child = os.open(part, flags | nofollow, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        return "skipped", f"refused: {_printable(part)} on its path is not a plain directory", {}
                    return "failed", f"cannot open the directory {_printable(part)}: {_os_reason(exc)}", {}
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    return "skipped", f"refused: {_printable(part)} on its path is a symlink or not a directory", {}
                return "failed", f"cannot open the directory {_printable(part)}: {_os_reason(exc)}", {}
            os.close(fd)
            fd = child
        name = parts[-1]
        try:
            there = _lstat(name, fd)
        except OSError as exc:
            return "failed", f"cannot look at the target: {_os_reason(exc)}", {}
        if there is not None:
            return _same_file(fd, name, there, size, etag, sha256)
        if dry_run:
            return "would pull", f"{_human_bytes(size)} from {item.get('source') or 'the store'}", {}
        return _fetch_into(fd, name, url, size=size, etag=etag, sha256=sha256, timeout=timeout)
    finally:
        os.close(fd)


def _fetch_into(
    fd: int, name: str, url: str, *, size: int, etag: str, sha256: str, timeout: float
) -> tuple[str, str, dict]:
    tmp = f"{PULL_TEMP_PREFIX}{os.urandom(8).hex()}{PULL_TEMP_SUFFIX}"
    create = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    placed = False
    try:
        try:
            out = os.fdopen(os.open(tmp, create, 0o666, dir_fd=fd), "wb")
        except OSError as exc:
            return "failed", f"cannot create a temporary file beside the target: {_os_reason(exc)}", {}
        try:
            with out:
                n, got_sha, got_md5, encrypted = _download(url, out, size=size, etag=etag, timeout=timeout)
                out.flush()
                os.fsync(out.fileno())
        except _Failed as exc:
            return "failed", str(exc), {}
        except OSError as exc:
            return "failed", f"cannot write it: {_os_reason(exc)}", {}
        measured = {"size": n, "sha256": got_sha}
        if n != size:
            return "failed", f"{n} bytes arrived; the promotion froze {size}", measured
        checked = ["size"]
        if sha256:
            if got_sha != sha256:
                return "failed", f"the sha256 of what arrived is {got_sha}; the catalog has {sha256}", measured
            checked.append("sha256")
        if _SINGLE_PART_ETAG.match(etag) and not encrypted:
            if got_md5 != etag:
                return (
                    "failed",
                    f"the MD5 of what arrived is {got_md5}; the ETag (MD5 of a single-part upload) is {etag}",
                    measured,
                )
            checked.append("MD5 = ETag")
        try:
            refused = _place(fd, tmp, name)
        except OSError as exc:
            return "failed", f"cannot put it in place: {_os_reason(exc)}", {}
        if refused:
            return "skipped", refused, {}
        placed = True
        with contextlib.suppress(OSError):
            os.fsync(fd)  # the new name survives a crash
        return "pulled", f"pulled {_human_bytes(n)}; {', '.join(checked)} checked", measured
    finally:
        if not placed:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)


def fetch_pulls(server: str, token: str, root: str, *, timeout: float = 60.0) -> dict[str, Any]:
    """The files this host was asked to pull below ``root``, each with a presigned URL: {"items": [...], ...}."""
    return _fetch_work(PULLS_PATH, server, token, root, timeout=timeout)


def report_pulls(server: str, token: str, results: list[dict[str, Any]], *, timeout: float = 60.0) -> dict:
    return _report_work(PULLS_PATH, server, token, results, timeout=timeout)


def _pull_root(args: argparse.Namespace, root: str, server: str, token: str, cache: ChecksumCache | None) -> bool:
    """Pull this root's files and report each; then report the root itself. True when every file is in place."""
    label = f"{args.host}:{root}"
    tried: set[Any] = set()
    counts: collections.Counter[str] = collections.Counter()
    try:
        while True:
            doc = fetch_pulls(server, token, root, timeout=args.timeout)
            fetched = time.monotonic()
            for note in doc.get("unavailable") or []:
                _stderr_warn(f"{label}: {_one_line(note)}")
            items = [
                i for i in doc["items"] if isinstance(i, dict) and isinstance(i.get("id"), int) and i["id"] not in tried
            ]
            if not items:
                break
            results: list[dict[str, Any]] = []
            reported = time.monotonic()
            started = len(tried)
            for item in items:
                lifetime = item.get("expires_in")
                if isinstance(lifetime, (int, float)) and lifetime > 0:
                    margin = min(URL_MARGIN_SECONDS, lifetime / 4)
                    if time.monotonic() > fetched + lifetime - margin:
                        break  # its URL is about to expire: report what is done and ask for fresh ones
                tried.add(item["id"])
                where = _printable(str(item.get("path")))
                measured: dict[str, Any]
                if item.get("root") != root:
                    result, detail, measured = "skipped", "refused: the item is not below this root", {}
                else:
                    try:
                        result, detail, measured = pull_file(root, item, timeout=args.timeout, dry_run=args.dry_run)
                    except _Later as exc:
                        counts["later"] += 1
                        _stderr_warn(f"{label}: {where}: left for the next run: {exc}")
                        continue
                counts[result] += 1
                if args.dry_run:
                    print(f"{label}: {where}: {result}: {detail}", flush=True)
                    continue
                if result != "pulled":
                    _stderr_warn(f"{label}: {where}: {result}: {detail}")
                results.append({"id": item["id"], "result": result, "detail": detail, **measured})
                if len(results) >= REPORT_EVERY or time.monotonic() - reported >= REPORT_SECONDS:
                    answer = report_pulls(server, token, results, timeout=args.timeout)
                    results, reported = [], time.monotonic()
                    if answer.get("ignored"):
                        break  # a promotion ended meanwhile (cancelled): ask which files are still wanted
            if results:
                report_pulls(server, token, results, timeout=args.timeout)
            if len(tried) == started:
                raise AgentError("the server's URLs expire before a download can start; nothing was pulled")
    except AgentError as exc:
        raise AgentError(f"{label}: {exc}", fatal=exc.fatal) from None
    if args.dry_run:
        print(
            f"{label}: {counts['would pull']} would be pulled, {counts['pulled']} already in place, "
            f"{counts['skipped']} refused, {counts['failed']} failing (dry run: nothing written or reported)",
            flush=True,
        )
        return counts["skipped"] == 0 and counts["failed"] == 0
    later = f", {counts['later']} left for the next run" if counts["later"] else ""
    print(
        f"{label}: {counts['pulled']} pulled, {counts['skipped']} refused, {counts['failed']} failed{later}",
        flush=True,
    )
    if counts["pulled"]:
        # The catalog learns of the new copy from the root's inventory, as of every file on this host.
        _send_root(args, root, server, token, cache)
    return counts["skipped"] == 0 and counts["failed"] == 0 and counts["later"] == 0


# --- offloads: the files the server asked this host to upload to a bucket (agent_push) -------------


class _StoreAnswer(Exception):
    """The store answered a request with an error status; ``text`` is its one-line reason."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def _store_reason(status: int, reason: str, body: bytes) -> str:
    text = body[:8192].decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]{1,100})</Code>", text)
    message = re.search(r"<Message>([^<]{1,300})</Message>", text)
    line = f"the store answered {status} {reason}".rstrip()
    if code:
        line += f": {code.group(1)}"
    if message:
        line += f" ({message.group(1)})"
    return _one_line(line)


def _may_pass(status: int, text: str) -> bool:
    """Trouble worth trying again: throttling, the store's 5xx, a URL that expired."""
    return status in (408, 429) or status >= 500 or (status == 403 and "expired" in text.lower())


class _StoreConnections:
    """One kept-alive connection per store address, per thread: 10,000 small PUTs need not 10,000 handshakes."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.local = threading.local()

    def get(self, url: urllib.parse.SplitResult) -> tuple[http.client.HTTPConnection, str, list[tuple[str, str]], bool]:
        """A connection for ``url``'s store, its request target, the proxy's headers, and whether it was used before."""
        pool = self.local.__dict__.setdefault("pool", {})
        key = (url.scheme, url.netloc)
        found = pool.get(key)
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        if found is not None:
            conn, proxy_target, headers = found
            return conn, (url.geturl() if proxy_target else target), headers, True
        conn, request_target, headers = _connection(url, self.timeout)
        pool[key] = (conn, request_target != target, headers)
        return conn, request_target, headers, False

    def drop(self, url: urllib.parse.SplitResult) -> None:
        pool = self.local.__dict__.setdefault("pool", {})
        found = pool.pop((url.scheme, url.netloc), None)
        if found is not None:
            found[0].close()


def _put_range(
    conns: _StoreConnections,
    url: str,
    f: BinaryIO,
    *,
    offset: int,
    length: int,
    headers: dict[str, str],
    hashers: list[Any],
) -> tuple[int, str, bool, list[Any]]:
    """PUT ``length`` bytes of ``f`` from ``offset`` to a presigned URL, hashing them as they go.

    ``hashers`` are left as they are: copies of them are fed and returned. Returns (bytes sent, the
    store's ETag, whether the store encrypted with KMS or a customer key, which makes an ETag no MD5,
    the fed hashers). Raises _StoreAnswer for an error status, OSError for the network or the file.
    A kept-alive connection the store closed meanwhile is replaced at once, once.
    """
    parts = urllib.parse.urlsplit(url)
    for attempt in (1, 2):
        conn, target, proxy_headers, reused = conns.get(parts)
        fed = [h.copy() for h in hashers]
        f.seek(offset)
        sent = 0
        try:
            conn.putrequest("PUT", target, skip_host=False, skip_accept_encoding=True)
            conn.putheader("User-Agent", AGENT)
            conn.putheader("Content-Length", str(length))
            for name, value in [*proxy_headers, *headers.items()]:
                conn.putheader(name, value)
            conn.endheaders()
            send_error: OSError | None = None
            while sent < length:
                block = f.read(min(HASH_BLOCK, length - sent))
                if not block:
                    raise _Failed(f"the file ended after {offset + sent} bytes: it changed while it was read")
                for h in fed:
                    h.update(block)
                sent += len(block)
                try:
                    conn.send(block)
                except OSError as exc:  # the store may answer (412, 400) before taking the whole body
                    send_error = exc
                    break
            response = conn.getresponse()
            answer = response.read()
        except (BrokenPipeError, ConnectionResetError) as exc:  # RemoteDisconnected among them
            conns.drop(parts)
            if attempt == 1 and reused:
                continue  # a kept-alive connection the store had closed: once more, at once, on a fresh one
            raise OSError(exc.errno or 0, f"the connection broke off: {_os_reason(exc)}") from None
        except (OSError, http.client.HTTPException) as exc:
            conns.drop(parts)
            if isinstance(exc, OSError):
                raise
            raise OSError(0, f"the store's answer was garbled: {_one_line(exc)}") from None
        if response.will_close:
            conns.drop(parts)
        if response.status >= 300:
            raise _StoreAnswer(response.status, _store_reason(response.status, response.reason, answer))
        if send_error is not None:
            raise OSError(send_error.errno or 0, f"the upload broke off: {_os_reason(send_error)}")
        sse = (response.getheader("x-amz-server-side-encryption") or "").lower()
        keyed = sse.startswith(("aws:kms", "aws:kms:dsse")) or bool(
            response.getheader("x-amz-server-side-encryption-customer-algorithm")
        )
        return sent, _strip_etag(response.getheader("ETag")), keyed, fed
    raise OSError(0, "the connection broke off")  # pragma: no cover - the loop returns or raises


def _with_retries(work: Callable[[], Any], what: str, retries: int) -> Any:
    """Run ``work``, again after a pause while the trouble may pass; _Later when it does not, _Failed for good."""
    delay = 0.5
    for attempt in range(1, retries + 1):
        try:
            return work()
        except _StoreAnswer as exc:
            if not _may_pass(exc.status, exc.text):
                raise _Failed(f"{what}: {exc.text}") from None
            if attempt == retries or exc.status == 403:
                raise _Later(f"{what}: {exc.text}") from None
        except OSError as exc:
            if attempt == retries:
                raise _Later(f"{what}: cannot reach the store: {_os_reason(exc)}") from None
        time.sleep(delay)
        delay *= 2
    raise _Later(what)  # pragma: no cover


def _hash_rest(f: BinaryIO, offset: int, hashers: list[Any]) -> int:
    f.seek(offset)
    n = offset
    for block in iter(lambda: f.read(HASH_BLOCK), b""):
        for h in hashers:
            h.update(block)
        n += len(block)
    return n


def _layout(item: dict[str, Any], size: int) -> list[dict[str, Any]] | None:
    """The parts of a multipart item, checked to cover the file end to end in order; None when they do not."""
    parts = item.get("parts")
    if not isinstance(parts, list) or not parts:
        return None
    offset = 0
    for n, part in enumerate(parts, start=1):
        if not isinstance(part, dict) or part.get("n") != n or part.get("offset") != offset:
            return None
        length, url = part.get("size"), part.get("url")
        if not isinstance(length, int) or length <= 0 or not isinstance(url, str):
            return None
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            return None
        offset += length
    return parts if offset == size else None


def _open_source(root: str, rel: str) -> tuple[BinaryIO | None, str, str]:
    """Open ``root/rel`` for reading without following any symlink: (file, "", "") or (None, result, why)."""
    parts = rel.split("/")
    try:
        fd = _open_dirs(root, parts[:-1])
    except FileNotFoundError:
        return None, "failed", "missing: its directory is gone"
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return None, "skipped", "refused: a directory on its path is a symlink or not a directory"
        return None, "failed", f"cannot open its directory: {_os_reason(exc)}"
    try:
        try:
            file_fd = os.open(parts[-1], os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
        except FileNotFoundError:
            return None, "failed", "missing: no such file"
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return None, "skipped", "refused: it is a symlink; never followed"
            return None, "failed", f"cannot open it: {_os_reason(exc)}"
    finally:
        os.close(fd)
    return os.fdopen(file_fd, "rb"), "", ""


def push_file(
    root: str,
    item: dict[str, Any],
    *,
    conns: _StoreConnections | None = None,
    timeout: float = 60.0,
    retries: int = 3,
    dry_run: bool = False,
    part_pool: concurrent.futures.ThreadPoolExecutor | None = None,
) -> tuple[str, str, dict]:
    """Upload one file the server asked for from ``root`` to its bucket, reading it once.

    ``part_pool``: a multipart upload's parts are sent side by side on its threads (the whole file's
    checksums are computed meanwhile, in one more pass over it); without it, one after the other.

    Returns (result, detail, measured): "uploaded" with measured {"size", "sha256", "md5"} (and the
    "parts" of a multipart upload); "skipped" when the path is not a plain relative path below the
    root, leads through a symlink, or an object is at the target already (measured then says
    "exists", for the server to judge whether it is identical); "failed" when the file is missing,
    changed size, or the store refused the bytes. Each PUT is conditional (If-None-Match: *), so
    nothing is replaced. A part the store holds already is read (for the checksums) but not sent
    again when its MD5 is the part's ETag. Raises _Later for trouble that may pass.
    """
    try:
        rel, source, size = item["path"], item["source"], item["size"]
        method = item["method"]
        sha256 = item.get("sha256") or ""
    except (KeyError, TypeError):
        return "skipped", "refused: the server sent an incomplete item", {}
    if not all(isinstance(v, str) for v in (rel, source, sha256)) or not isinstance(size, int) or size < 0:
        return "skipped", "refused: the server sent an incomplete item", {}
    if sha256 and not SHA256_HEX.match(sha256):
        return "skipped", "refused: the server sent a malformed sha256", {}
    if path_problem(rel):
        return "skipped", "refused: not a plain relative path below the root", {}
    if source != root.rstrip("/") + "/" + rel:
        return "skipped", "refused: the source is not the path below this root", {}
    where = item.get("target") or "the bucket"
    parts: list[dict[str, Any]] | None = None
    if method == "multipart" and not dry_run:
        parts = _layout(item, size)
        if parts is None:
            return "skipped", "refused: the server sent parts that do not cover the file", {}
    elif method == "put" and not dry_run:
        url, headers = item.get("url"), item.get("headers") or {}
        if not isinstance(url, str) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            return "skipped", "refused: the upload URL is not http(s)", {}
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            return "skipped", "refused: the server sent malformed headers", {}
    elif method not in ("put", "multipart"):
        return "skipped", f"refused: unknown upload method {_printable(str(method))[:40]}", {}
    f, result, why = _open_source(root, rel)
    if f is None:
        return result, why, {}
    with f:
        try:
            st = os.fstat(f.fileno())
        except OSError as exc:
            return "failed", f"cannot stat it: {_os_reason(exc)}", {}
        if not stat.S_ISREG(st.st_mode):
            return "skipped", "refused: not a regular file", {}
        if st.st_size != size:
            return "failed", f"changed: its size is {st.st_size} bytes, the offload froze {size}", {}
        if dry_run:
            return "would upload", f"{_human_bytes(size)} to {where} ({method})", {}
        conns = conns or _StoreConnections(timeout)
        try:
            if parts is None:
                measured = _push_whole(f, item, size, conns, retries)
            elif part_pool is not None and len(parts) > 1:
                measured = _push_parts_side_by_side(f, parts, size, conns, retries, part_pool)
            else:
                measured = _push_parts(f, parts, size, conns, retries)
        except _Failed as exc:
            return "failed", str(exc), {}
        except OSError as exc:  # reading the file
            return "failed", f"cannot read it: {_os_reason(exc)}", {}
        try:
            after = os.fstat(f.fileno())
        except OSError as exc:
            return "failed", f"cannot stat it: {_os_reason(exc)}", {}
        if (after.st_size, after.st_mtime_ns) != (st.st_size, st.st_mtime_ns):
            return "failed", "changed while it was read: not counted as uploaded", measured
    if measured.get("exists"):
        return "skipped", f"an object is at {where} already; never replaced", measured
    checked = "sha256 matches the catalog" if sha256 and measured["sha256"] == sha256 else "sha256 measured"
    how = f"in {len(measured['parts'])} parts" if "parts" in measured else "in one PUT"
    return "uploaded", f"uploaded {_human_bytes(size)} {how}; {checked}", measured


def _push_whole(f: BinaryIO, item: dict[str, Any], size: int, conns: _StoreConnections, retries: int) -> dict:
    state: dict[str, Any] = {}

    def attempt() -> None:
        try:
            _n, state["etag"], state["keyed"], (state["sha"], state["md5"]) = _put_range(
                conns,
                item["url"],
                f,
                offset=0,
                length=size,
                headers=item["headers"] or {},
                hashers=[hashlib.sha256(), _md5()],
            )
        except _StoreAnswer as exc:
            if exc.status != 412:
                raise
            # If-None-Match: an object is at the key already. The server judges it from what the file holds.
            state["sha"], state["md5"] = hashlib.sha256(), _md5()
            _hash_rest(f, 0, [state["sha"], state["md5"]])
            state["exists"] = True

    _with_retries(attempt, "the upload", retries)
    measured = {"size": size, "sha256": state["sha"].hexdigest(), "md5": state["md5"].hexdigest()}
    if state.get("exists"):
        return {**measured, "exists": True}
    etag = state["etag"]
    if _SINGLE_PART_ETAG.match(etag) and not state["keyed"] and etag != measured["md5"]:
        raise _Failed(f"the store's ETag {etag} is not the MD5 {measured['md5']} of what was sent")
    return measured


def _push_parts(f: BinaryIO, parts: list[dict[str, Any]], size: int, conns: _StoreConnections, retries: int) -> dict:
    sha, md5 = hashlib.sha256(), _md5()
    etags: list[dict[str, Any]] = []
    for part in parts:
        n, offset, length = part["n"], part["offset"], part["size"]
        held = _strip_etag(part.get("etag"))
        if held:
            whole = (sha.copy(), md5.copy())
            piece = _md5()
            f.seek(offset)
            left = length
            while left:
                block = f.read(min(HASH_BLOCK, left))
                if not block:
                    raise _Failed(f"the file ended inside part {n}: it changed while it was read")
                for h in (sha, md5, piece):
                    h.update(block)
                left -= len(block)
            if piece.hexdigest() == held:
                etags.append({"n": n, "etag": held})
                continue  # the store holds this part already: not sent again
            sha, md5 = whole  # the store's part is other bytes: send this one again
        sha, md5, piece, etag, keyed = _send_part(conns, part["url"], f, n, offset, length, (sha, md5), retries)
        if _SINGLE_PART_ETAG.match(etag) and not keyed and etag != piece.hexdigest():
            raise _Failed(f"the store's ETag {etag} of part {n} is not the MD5 {piece.hexdigest()} of what was sent")
        etags.append({"n": n, "etag": etag or piece.hexdigest()})
    return {"size": size, "sha256": sha.hexdigest(), "md5": md5.hexdigest(), "parts": etags}


class _PositionalReader:
    """seek/read over a file descriptor with pread: threads reading one file each keep their own position."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pos = 0

    def seek(self, offset: int) -> None:
        self.pos = offset

    def read(self, n: int) -> bytes:
        block = os.pread(self.fd, n, self.pos)
        self.pos += len(block)
        return block


def _push_parts_side_by_side(
    f: BinaryIO,
    parts: list[dict[str, Any]],
    size: int,
    conns: _StoreConnections,
    retries: int,
    pool: concurrent.futures.ThreadPoolExecutor,
) -> dict:
    """``_push_parts`` with the parts sent on ``pool``'s threads; the file's sha256 and MD5 in a pass meanwhile.

    Each part's MD5 is checked against the ETag the store answers; a part the store holds already (its MD5
    is that ETag) is not sent again. The first failing part (by number) is the one reported; the parts
    sent meanwhile stay with the upload, for the next run to skip.
    """
    fd = f.fileno()

    def one(part: dict[str, Any]) -> str:
        n, offset, length = part["n"], part["offset"], part["size"]
        reader = _PositionalReader(fd)
        held = _strip_etag(part.get("etag"))
        if held:
            piece = _md5()
            reader.seek(offset)
            left = length
            while left:
                block = reader.read(min(HASH_BLOCK, left))
                if not block:
                    raise _Failed(f"the file ended inside part {n}: it changed while it was read")
                piece.update(block)
                left -= len(block)
            if piece.hexdigest() == held:
                return held  # the store holds this part already: not sent again
        state: dict[str, Any] = {}

        def attempt() -> None:
            _sent, state["etag"], state["keyed"], state["hashers"] = _put_range(
                conns, part["url"], cast(BinaryIO, reader), offset=offset, length=length, headers={}, hashers=[_md5()]
            )

        _with_retries(attempt, f"part {n}", retries)
        piece, etag = state["hashers"][0], state["etag"]
        if _SINGLE_PART_ETAG.match(etag) and not state["keyed"] and etag != piece.hexdigest():
            raise _Failed(f"the store's ETag {etag} of part {n} is not the MD5 {piece.hexdigest()} of what was sent")
        return etag or piece.hexdigest()

    futures = [pool.submit(one, part) for part in parts]
    sha, md5 = hashlib.sha256(), _md5()
    whole = _PositionalReader(fd)
    read = _hash_rest(cast(BinaryIO, whole), 0, [sha, md5])
    concurrent.futures.wait(futures)
    for future in futures:  # the first failure by part number; the others' outcomes are in the store
        future.result()
    if read != size:
        raise _Failed(f"the file holds {read} bytes, not {size}: it changed while it was read")
    etags = [{"n": part["n"], "etag": future.result()} for part, future in zip(parts, futures, strict=True)]
    return {"size": size, "sha256": sha.hexdigest(), "md5": md5.hexdigest(), "parts": etags}


def _send_part(
    conns: _StoreConnections,
    url: str,
    f: BinaryIO,
    n: int,
    offset: int,
    length: int,
    whole: tuple[Any, Any],
    retries: int,
) -> tuple[Any, Any, Any, str, bool]:
    """Upload one part, each try from the hash state ``whole`` had before it: (sha256, MD5, part MD5, ETag, keyed)."""
    state: dict[str, Any] = {}

    def attempt() -> None:
        _sent, state["etag"], state["keyed"], state["hashers"] = _put_range(
            conns, url, f, offset=offset, length=length, headers={}, hashers=[whole[0], whole[1], _md5()]
        )

    _with_retries(attempt, f"part {n}", retries)
    sha, md5, piece = state["hashers"]
    return sha, md5, piece, state["etag"], state["keyed"]


def fetch_offloads(
    server: str, token: str, root: str, *, after: int = 0, dry_run: bool = False, timeout: float = 60.0
) -> dict[str, Any]:
    """The files this host was asked to upload from ``root``, each with presigned URLs: {"items": [...], ...}."""
    extra = {"after": str(after)} if after else {}
    if dry_run:
        extra["dry_run"] = "1"
    else:
        extra["defer"] = "sha256"  # a file with no sha256 on record: measured first, then signed with it
    return _fetch_work(OFFLOADS_PATH, server, token, root, timeout=timeout, extra=extra)


def sign_offloads(server: str, token: str, claims: list[dict[str, Any]], *, timeout: float = 60.0) -> dict:
    """Have the server sign PUTs with the sha256 this agent measured: the store then checks and keeps it."""
    body = json.dumps({"sign": claims}).encode()
    status, reason, answer = _request(
        "POST",
        server.rstrip("/") + OFFLOADS_SIGN_PATH,
        token,
        timeout=timeout,
        body=io.BytesIO(body),
        length=len(body),
        headers=[("Content-Type", "application/json")],
    )
    if status != 200:
        raise AgentError(_refusal(status, reason, answer), fatal=status in (401, 403))
    doc = _answer_json(answer)
    if doc is None or not isinstance(doc.get("items"), list):
        raise AgentError(f"server answered without a list of items: {_one_line(answer[:200])}")
    return doc


def measure_file(root: str, item: dict[str, Any]) -> tuple[str, str, str]:
    """The sha256 of a file the server asked to be measured before its PUT is signed: (sha256, "", "").

    ("", result, why) when it cannot be read as asked (reported as such); ("", "", "") when the item
    itself is not acceptable, which ``push_file`` then refuses with its reason. Never follows a symlink.
    """
    rel, source, size = item.get("path"), item.get("source"), item.get("size")
    if not isinstance(rel, str) or not isinstance(source, str) or not isinstance(size, int) or size < 0:
        return "", "", ""
    if path_problem(rel) or source != root.rstrip("/") + "/" + rel:
        return "", "", ""
    f, result, why = _open_source(root, rel)
    if f is None:
        return "", result, why
    with f:
        try:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                return "", "skipped", "refused: not a regular file"
            if st.st_size != size:
                return "", "failed", f"changed: its size is {st.st_size} bytes, the offload froze {size}"
            sha = hashlib.sha256()
            if _hash_rest(f, 0, [sha]) != size:
                return "", "failed", "changed while it was read: its size moved"
        except OSError as exc:
            return "", "failed", f"cannot read it: {_os_reason(exc)}"
    return sha.hexdigest(), "", ""


def report_offloads(server: str, token: str, results: list[dict[str, Any]], *, timeout: float = 60.0) -> dict:
    return _report_work(OFFLOADS_PATH, server, token, results, timeout=timeout)


def _offload_root(args: argparse.Namespace, root: str, server: str, token: str) -> bool:
    """Upload this root's files with ``--jobs`` threads, reporting as they finish. True when none is left over."""
    label = f"{args.host}:{root}"
    counts: collections.Counter[str] = collections.Counter()
    conns = _StoreConnections(args.timeout)
    part_pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs, thread_name_prefix="part")
    tried: set[int] = set()
    after = 0
    exhausted = False
    results: list[dict[str, Any]] = []
    reported = time.monotonic()

    def one(item: dict[str, Any], fetched: float) -> tuple[dict[str, Any], str, str, dict]:
        if item.get("root") != root:
            return item, "skipped", "refused: the item is not below this root", {}
        lifetime = item.get("expires_in")
        if isinstance(lifetime, (int, float)) and time.monotonic() > fetched + lifetime - min(
            URL_MARGIN_SECONDS, lifetime / 4
        ):
            return item, "later", "its URL expired before the upload could start", {}
        try:
            return (
                item,
                *push_file(root, item, conns=conns, timeout=args.timeout, dry_run=args.dry_run, part_pool=part_pool),
            )
        except _Later as exc:
            return item, "later", str(exc), {}

    def settled(item: dict[str, Any], result: str, why: str) -> tuple[dict[str, Any], str, str, dict]:
        return item, result, why, {}

    def _signed(pool: concurrent.futures.ThreadPoolExecutor, deferred: list[dict[str, Any]]) -> set:
        """Measure the files side by side, have their PUTs signed with the sha256s, and start their uploads."""
        futures: set[concurrent.futures.Future] = set()
        claims = []
        for item, (sha256, result, why) in zip(
            deferred, pool.map(lambda i: measure_file(root, i), deferred), strict=True
        ):
            if sha256:
                claims.append({"id": item["id"], "sha256": sha256})
            elif result:
                futures.add(pool.submit(settled, item, result, why))
            else:
                futures.add(pool.submit(one, item, time.monotonic()))  # push_file refuses it, with its reason
        if claims:
            doc = sign_offloads(server, token, claims, timeout=args.timeout)
            fetched = time.monotonic()
            for note in doc.get("unavailable") or []:
                _stderr_warn(f"{label}: {_one_line(note)}")
            for item in doc["items"]:
                if isinstance(item, dict) and isinstance(item.get("id"), int) and item["id"] in tried:
                    futures.add(pool.submit(one, item, fetched))
        return futures

    def flush(force: bool) -> None:
        nonlocal results, reported
        if results and (force or len(results) >= REPORT_EVERY or time.monotonic() - reported >= REPORT_SECONDS):
            answer = report_offloads(server, token, results, timeout=args.timeout)
            counts["later"] += int(answer.get("pending") or 0)
            counts["done"] += int(answer.get("done") or 0)
            counts["not done"] += int(answer.get("failed") or 0) + int(answer.get("blocked") or 0)
            results, reported = [], time.monotonic()

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            running: set[concurrent.futures.Future] = set()
            while running or not exhausted:
                if not exhausted and len(running) < 2 * args.jobs:
                    doc = fetch_offloads(server, token, root, after=after, dry_run=args.dry_run, timeout=args.timeout)
                    fetched = time.monotonic()
                    for note in doc.get("unavailable") or []:
                        _stderr_warn(f"{label}: {_one_line(note)}")
                    items = [
                        i
                        for i in doc["items"]
                        if isinstance(i, dict) and isinstance(i.get("id"), int) and i["id"] not in tried
                    ]
                    if not items:
                        exhausted = True
                    for item in items:
                        tried.add(item["id"])
                        after = max(after, item["id"])
                    deferred = [i for i in items if i.get("sign") == "sha256" and not args.dry_run]
                    for item in items:
                        if item not in deferred:
                            running.add(pool.submit(one, item, fetched))
                    if deferred:
                        running |= _signed(pool, deferred)
                    continue
                finished, running = concurrent.futures.wait(
                    running, timeout=REPORT_SECONDS, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in finished:
                    item, result, detail, measured = future.result()
                    where = _printable(str(item.get("path")))
                    counts[result] += 1
                    if args.dry_run:
                        print(f"{label}: {where}: {result}: {detail}", flush=True)
                        continue
                    if result == "later":
                        _stderr_warn(f"{label}: {where}: left for the next run: {detail}")
                        continue
                    if measured.get("exists"):
                        counts["exists"] += 1
                        counts[result] -= 1
                    elif result != "uploaded":
                        _stderr_warn(f"{label}: {where}: {result}: {detail}")
                    results.append({"id": item["id"], "result": result, "detail": detail, **measured})
                flush(False)
            flush(True)
    except AgentError as exc:
        raise AgentError(f"{label}: {exc}", fatal=exc.fatal) from None
    finally:
        part_pool.shutdown(wait=True)
    if args.dry_run:
        print(
            f"{label}: {counts['would upload']} would be uploaded, {counts['skipped']} refused, "
            f"{counts['failed']} failing (dry run: nothing sent or reported)",
            flush=True,
        )
        return counts["skipped"] == 0 and counts["failed"] == 0
    later = f", {counts['later']} left for the next run" if counts["later"] else ""
    found = f", {counts['exists']} found at the target" if counts["exists"] else ""
    done = f"{counts['uploaded']} uploaded{found}, {counts['skipped']} refused, {counts['failed']} failed"
    judged = f"the server counts {counts['done']} done, {counts['not done']} blocked or failed"
    print(f"{label}: {done}; {judged}{later}", flush=True)
    return not (counts["skipped"] or counts["failed"] or counts["later"] or counts["not done"])


# --- command line ---------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        if message.startswith("unrecognized arguments"):
            # Only option names are echoed: a misplaced value might be a secret.
            names = [word for word in message.split(":", 1)[1].split() if word.startswith("-")]
            message = "unrecognized arguments" + (f": {' '.join(names)}" if names else "")
        print(f"{PROG}: {_one_line(message)} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Report the checkpoint files below this host's roots to a Checkpoint Fleet server.",
        epilog="The token comes from CKPTFLEET_TOKEN, or from the file named by --token-file or "
        "CKPTFLEET_TOKEN_FILE; never from the command line.",
        allow_abbrev=False,  # else "--token SECRET" would be taken as --token-file and echoed back
    )
    parser.add_argument(
        "--server",
        default=os.environ.get("CKPTFLEET_SERVER"),
        help="server base URL (default: $CKPTFLEET_SERVER)",
    )
    parser.add_argument("--token-file", help="file holding the host token (default: $CKPTFLEET_TOKEN_FILE)")
    parser.add_argument("--token", nargs="?", const="", help=argparse.SUPPRESS)
    parser.add_argument(
        "--host", default=socket.gethostname(), help="this host's registered name (default: %(default)s)"
    )
    parser.add_argument(
        "--root",
        action="append",
        required=True,
        metavar="PATH",
        help="a registered root to report; repeat for more (one inventory each)",
    )
    parser.add_argument(
        "--checksums",
        action="store_true",
        help="send the sha256 and CRCs of every file (crc32; crc32c and crc64nvme with the optional module awscrt), "
        "whole and per block, and check the CRC32 of every member of torch.save zips; cached, so an unchanged "
        "file is read once",
    )
    parser.add_argument(
        "--scrub-share",
        type=_fraction,
        default=0.0,
        metavar="FRACTION",
        help="with --checksums, also re-read about this share of each root's bytes (the files whose checksums "
        "are oldest), ignoring the cache, to find bit rot: e.g. 0.05 daily verifies every file every ~20 days "
        "(default: %(default)g, off)",
    )
    parser.add_argument(
        "--scrub-rate",
        type=_positive,
        default=DEFAULT_SCRUB_RATE,
        metavar="MIB_PER_S",
        help="read scrubbed files at most this fast, so training I/O does not suffer; first-time hashing "
        "is not throttled (default: %(default)g)",
    )
    parser.add_argument(
        "--cache", default=DEFAULT_CACHE, metavar="PATH", help="checksum cache, SQLite (default: %(default)s)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the NDJSON lines to stdout instead of sending them"
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="after the upload, wait until the server has applied or failed the inventory",
    )
    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="give up waiting after this long (default: %(default)g)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="network timeout of each request (default: %(default)g)",
    )
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="report a root with no files as empty (else the server refuses it, as an unmounted disk looks so)",
    )
    parser.add_argument(
        "--deletions",
        action="store_true",
        help="instead of reporting, delete the files the server scheduled for deletion below these roots "
        "(each checked for size and mtime first) and report what was done",
    )
    parser.add_argument(
        "--pulls",
        action="store_true",
        help="instead of reporting, pull the files the server asked this host to fetch into these roots "
        "(promotions): each checked for size and checksum, never replacing a file; report each, then the root. "
        "With --dry-run: say what would be pulled, write and report nothing",
    )
    parser.add_argument(
        "--offloads",
        action="store_true",
        help="instead of reporting, upload the files the server asked this host to move to a bucket (offloads) "
        "with the presigned URLs it signs: each read once for its sha256 and MD5, never replacing an object; "
        "report each. With --dry-run: say what would be uploaded, send and report nothing",
    )
    parser.add_argument(
        "--jobs",
        type=_count,
        default=DEFAULT_JOBS,
        metavar="N",
        help="with --offloads, upload this many files at once (default: %(default)s)",
    )
    parser.add_argument("--version", action="version", version=AGENT)
    return parser


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be between 1 and 64, not {text}")
    return value


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text}")
    return value


def checksums_note() -> str:
    """The one line a run with --checksums prints on stderr: which algorithms it computes."""
    note = f"checksums: sha256, {', '.join(CRC_ALGORITHMS)}"
    if _crt is None:
        note += " (crc32c and crc64nvme need the optional module awscrt: pip install awscrt)"
    return note


def _open_cache(args: argparse.Namespace) -> ChecksumCache:
    print(f"{PROG}: {checksums_note()}", file=sys.stderr, flush=True)
    if args.scrub_share:
        print(
            f"{PROG}: scrubbing: re-reading the {args.scrub_share:.1%} of each root's bytes checksummed longest ago, "
            f"at most {args.scrub_rate:g} MiB/s",
            file=sys.stderr,
            flush=True,
        )
    return ChecksumCache(args.cache, scrub_share=args.scrub_share, scrub_rate=args.scrub_rate * MIB)


def _read_token(args: argparse.Namespace) -> str:
    path = args.token_file
    token = None
    if not path:
        token = os.environ.get("CKPTFLEET_TOKEN") or None
        path = None if token else os.environ.get("CKPTFLEET_TOKEN_FILE")
    if token is None:
        if not path:
            raise AgentError("no token: set CKPTFLEET_TOKEN, or CKPTFLEET_TOKEN_FILE or --token-file to a file")
        try:
            with open(path, "rb") as f:
                raw = f.read(4096)
        except OSError as exc:
            raise AgentError(f"cannot read token file {_printable(path)}: {_os_reason(exc)}") from None
        try:
            token = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise AgentError(f"token file {_printable(path)} does not hold a token (not ASCII)") from None
        source = f"token file {_printable(path)}"
    else:
        token = token.strip()
        source = "CKPTFLEET_TOKEN"
    if not token or not token.isprintable() or any(c.isspace() for c in token):
        raise AgentError(f"{source} does not hold a single-line token")
    return token


def _check_server(server: str | None) -> str:
    if not server:
        raise AgentError("no server: pass --server URL or set CKPTFLEET_SERVER")
    parts = urllib.parse.urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AgentError(f"server URL {server!r} must look like https://fleet.example.com")
    return server.rstrip("/")


LEASES_PATH = "/api/v1/agent/leases/"
LEASE_PURPOSES = ("resuming", "evaluating", "exporting", "other")


def _lease_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ckptfleet-agent lease",
        description="Take, renew or release a lease on a checkpoint this host holds a copy of: while it is live "
        "nothing deletes or demotes the checkpoint. Prints the lease as JSON (take: its id).",
    )
    parser.add_argument("action", choices=("take", "renew", "release"))
    parser.add_argument("target", type=int, metavar="ID", help="take: the checkpoint's id; renew/release: the lease's")
    parser.add_argument("--owner", default="", help="take: who uses it, e.g. the job's name")
    parser.add_argument("--purpose", choices=LEASE_PURPOSES, default="resuming", help="take (default: %(default)s)")
    parser.add_argument("--ttl", type=int, default=3600, metavar="SECONDS", help="take/renew (default: %(default)s)")
    parser.add_argument("--server", default=os.environ.get("CKPTFLEET_SERVER"), help="default: $CKPTFLEET_SERVER")
    parser.add_argument("--token-file", help="file holding the host token (default: $CKPTFLEET_TOKEN_FILE)")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS")
    return parser


def lease_command(argv: list[str]) -> int:
    """``ckptfleet-agent lease take|renew|release``: one call to the server, with the host's token."""
    args = _lease_parser().parse_args(argv)
    server, token = _check_server(args.server), _read_token(args)
    if args.action == "take":
        if not args.owner.strip():
            raise AgentError("lease take needs --owner: the job or person using the checkpoint")
        path = LEASES_PATH
        doc = {"checkpoint": args.target, "owner": args.owner, "purpose": args.purpose, "ttl_seconds": args.ttl}
    else:
        path = f"{LEASES_PATH}{args.target}/{args.action}/"
        doc = {"ttl_seconds": args.ttl} if args.action == "renew" else {}
    answer = _post_json(path, server, token, doc, timeout=args.timeout, ok=(200, 201))
    print(json.dumps(answer, sort_keys=True), flush=True)
    return 0


def _run(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "lease":
        return lease_command(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if args.scrub_share and not args.checksums:
        parser.error("--scrub-share needs --checksums: scrubbing re-reads files to renew their checksums")
    if args.token is not None:
        raise AgentError("--token is not accepted: put the token in CKPTFLEET_TOKEN or a --token-file")
    if not args.host or REFUSED_PATH_CHARS.search(args.host):
        raise AgentError("--host must be a plain host name")
    roots = list(dict.fromkeys(os.path.abspath(root) for root in args.root))
    for root in roots:
        _check_root(root)  # all roots are checked before anything is sent: a typo is a config error
    server = token = None
    chosen = [name for name in ("deletions", "pulls", "offloads") if getattr(args, name)]
    if len(chosen) > 1:
        raise AgentError(f"--{' and --'.join(chosen)} do not go together: run one, then the other")
    if not args.dry_run or args.pulls or args.offloads:
        server = _check_server(args.server)
        token = _read_token(args)
    if args.offloads:
        failed = _for_each_root(roots, lambda root: _offload_root(args, root, server or "", token or ""))
        return 1 if failed else 0
    if args.pulls:
        return _pulls(args, roots, server or "", token or "")
    if args.deletions:
        if args.dry_run:
            raise AgentError("--deletions and --dry-run do not go together")
        failed = _for_each_root(roots, lambda root: _delete_root(args, root, server or "", token or ""))
        return 1 if failed else 0
    cache = _open_cache(args) if args.checksums else None
    try:
        if args.dry_run:
            out = getattr(sys.stdout, "buffer", None)
            sys.stdout.flush()
            for root in roots:
                lines = inventory_lines(
                    root, args.host, checksums=args.checksums, cache=cache, allow_empty=args.allow_empty
                )
                if out is not None:
                    _write_lines(lines, out)
                else:
                    _write_lines(lines, _TextOut(sys.stdout))
            if out is not None:
                out.flush()
            return 0
        failed = _for_each_root(roots, lambda root: _send_root(args, root, server or "", token or "", cache))
    finally:
        if cache is not None:
            cache.close()
    return 1 if failed else 0


def _for_each_root(roots: list[str], work: Callable[[str], bool | None]) -> bool:
    """Run ``work`` on each root in turn; return whether any failed (raised, or answered False).

    A root's failure is reported and the next root is still done, unless the error is fatal (the
    server refused the token, say), which would fail every other root the same way.
    """
    failed = False
    for root in roots:
        try:
            failed = work(root) is False or failed
        except AgentError as exc:
            failed = True
            _error(str(exc))
            if exc.fatal:
                break
    return failed


def _pulls(args: argparse.Namespace, roots: list[str], server: str, token: str) -> int:
    cache = _open_cache(args) if args.checksums and not args.dry_run else None
    try:
        failed = _for_each_root(roots, lambda root: _pull_root(args, root, server, token, cache))
    finally:
        if cache is not None:
            cache.close()
    return 1 if failed else 0


class _TextOut:
    """Lets byte lines go to a text-only stdout (when tests or IDEs replace sys.stdout)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        return self.stream.write(data.decode("utf-8"))


def _error(message: str) -> None:
    print(f"{PROG}: {_one_line(message, 1000)}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the agent; return the exit status (0 ok, 1 failure, 2 usage error)."""
    try:
        return _run(argv)
    except SystemExit as exc:  # argparse: --help, --version, usage errors
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 2
    except AgentError as exc:
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    except BrokenPipeError:
        # stdout went away (``--dry-run | head``): nothing left to report to.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except Exception as exc:
        if os.environ.get("CKPTFLEET_AGENT_DEBUG"):
            raise
        _error(f"internal error: {type(exc).__name__}: {exc} (set CKPTFLEET_AGENT_DEBUG=1 for a traceback)")
        return 1


if __name__ == "__main__":
    sys.exit(main())
