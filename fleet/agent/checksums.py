"""One read of a file for its sha256 and its CRCs: the CRCs on a worker thread while this one reads and hashes,
small files' CRCs handed over in batches (``checksum_file``)."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from .common import HASH_BLOCK, MIB
from .crc import CHECKSUM_CHUNK, CrcPass, ZipMember

CHECKSUM_BUFFERS = 3  # one being read, one being CRC'd, one spare: the worker never waits for a read
CHECKSUM_INLINE_BYTES = 256 * 1024  # smaller files: no hand-off per buffer; a walk hands each whole (Pipeline)
CHECKSUM_DEFER_BYTES = 32 * 1024  # and of those, ones this short still on the reading thread (cheaper than a hand-off)
CHECKSUM_BATCH_FILES = 8  # small files are handed to the worker this many at a time (one wake-up for all)
CHECKSUM_BATCH_BYTES = MIB  # or this many bytes of them


class _ReadInto(Protocol):
    def readinto(self, buffer: bytearray, /) -> int | None: ...

    def read(self, size: int = -1, /) -> bytes: ...


@dataclasses.dataclass(frozen=True)
class FileChecksums:
    """What one read of a file gave: its sha256, the wire ``checksums`` object, the zip members' verdict
    (``{"checked": n, "bad": [names]}``, None when not checked) and when it was read (epoch seconds)."""

    sha256: str
    checksums: dict[str, Any]
    members: dict[str, Any] | None
    at: float


class Throttle:
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
    """Each file's computed CRCs (``CrcPass.compute`` of all its bytes), or what computing them raised."""
    results: list[Any] = []
    for compute, view in items:
        try:
            results.append(compute(view, offset))
        except BaseException as exc:  # raised by that file's result() on the reading thread
            results.append(exc)
    return results


class PendingSums:
    """The checksums of a small file read whole (``checksum_file(later=True)``): its sha256 taken on the
    reading thread, its CRCs under way (see ``_CrcBatch``). ``ready()`` says whether they are done;
    ``result()`` waits for them and gives the FileChecksums, or raises what computing them raised."""

    __slots__ = ("at", "batch", "crcs", "index", "sha256")

    def __init__(self, sha256: str, crcs: CrcPass, data: bytes) -> None:
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
    members: list[ZipMember] | None = None,
    throttle: Throttle | None = None,
    later: bool = False,
) -> FileChecksums | PendingSums:
    """sha256 and the CRCs of ``CRC_ALGORITHMS`` (per block and whole) of everything left in ``f``, in one read.

    ``size`` is the file's size when listed (it sets the block size). hashlib, zlib and awscrt
    release the GIL on large buffers, so a worker thread CRCs one buffer while this thread reads the
    next and feeds sha256; when the worker is behind (its core is busy) this thread CRCs the buffer
    itself rather than wait. With a second core free the pass costs little more than sha256 alone;
    on a busy machine, what its CPU does (sha256 + crc32, about 1.7x). Memory: three 1 MiB buffers.
    ``members`` (from ``zip_members``) are checked from the same bytes.

    A file below ``CHECKSUM_INLINE_BYTES`` is too short for that: waiting for the worker to wake up
    costs more than its CRCs. With ``later`` (a caller that can go on meanwhile, see ``Pipeline``)
    such a file, with no members to check and no throttle, is read whole into its own bytes, its
    sha256 taken here, and a ``PendingSums`` returned while its CRCs are left to the worker with
    the next few such files (``_CrcBatch``); without ``later``, or when it is under
    ``CHECKSUM_DEFER_BYTES``, this thread CRCs it.
    """
    crcs = CrcPass(size, members)
    sha = hashlib.sha256()
    offset = 0
    if later and size < CHECKSUM_INLINE_BYTES and members is None and throttle is None:
        data, whole = _read_whole(f, size, CHECKSUM_INLINE_BYTES)
        sha.update(data)
        if whole and len(data) >= CHECKSUM_DEFER_BYTES:
            return PendingSums(sha.hexdigest(), crcs, data)
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
