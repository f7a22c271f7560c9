"""The pipelined walk: small files' CRCs computed on the worker thread while ``scan_root`` reads on.

Its output must be the sequential walk's (``PIPELINE_FILES = 0``) byte for byte: the same lines in the
same order, the same warnings between them, the same cache rows. Real files, a real cache file, the
real worker thread; the clock is fixed so that ``checksummed_at`` is comparable.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import sqlite3
import threading
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest

from fleet import agent
from tests.agent_build import fresh_agent

KIB = 1024
MIB = 1024 * KIB
NOW = 1_790_000_000.125  # the fixed clock


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def without_crt(monkeypatch) -> Any:
    """A fresh copy of the agent's package loaded where ``import awscrt`` fails, as on a bare GPU host."""
    module = fresh_agent(monkeypatch, "agent_without_crt", without_awscrt=True)
    assert module.crc._crt is None
    return module


@pytest.fixture(params=["awscrt", "no-awscrt"])
def mod(request, monkeypatch) -> Any:
    if request.param == "awscrt":
        return agent
    return without_crt(monkeypatch)


# Sizes that mark a file for the patched CRC computation below (no other file has them).
SLOW = 77_777  # its CRCs take a while: the next name of the same file is reached meanwhile
FAILING = 55_555  # computing its CRCs fails with EIO


def mixed_tree(root: Path) -> dict[str, Path]:
    """Small files (on both sides of CHECKSUM_DEFER_BYTES) between large ones, in several directories,
    with facts, a small torch zip, two names of one file, a name the server refuses, and the files the
    test plays tricks on. Returns those by role."""
    sizes = [0, 1, 100, 31 * KIB, 32 * KIB, 100 * KIB, 200 * KIB, 256 * KIB - 1, 256 * KIB, 3 * MIB + 5]
    for d in range(3):
        for i, size in enumerate(sizes):
            write(root / f"d{d}" / f"f{i:02d}.bin", os.urandom(size))
        for i in range(12):  # enough waiting lines to reach the tight bounds
            write(root / f"d{d}" / "many" / f"r{i:03d}.distcp", os.urandom(40 * KIB + i))
    write(root / "d1" / "config.json", b'{"model_type": "llama", "num_hidden_layers": 2}')
    roles = {
        "cached": write(root / "d0" / "cached.distcp", os.urandom(150 * KIB)),
        "stale": write(root / "d0" / "stale.distcp", os.urandom(120 * KIB)),  # a cache row of other content
        "changing": write(root / "d1" / "changing.distcp", os.urandom(90 * KIB)),  # changes while it is read
        "slow": write(root / "d2" / "a-linked.distcp", os.urandom(SLOW)),
        # Still waiting when d1 is listed and its refused name warned about: the warning waits too.
        "last": write(root / "d0" / "zz-slow.distcp", os.urandom(SLOW)),
        "failing": write(root / "d2" / "failing.distcp", os.urandom(FAILING)),
    }
    os.link(roles["slow"], root / "d2" / "b-link.distcp")
    write(root / "d1" / "bad\x01name.bin", b"refused")
    with zipfile.ZipFile(root / "d2" / "small.pt", "w") as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        zf.writestr("archive/data/0", os.urandom(60 * KIB))
    return roles


def open_cache(mod: Any, path: Path) -> Any:
    cache = mod.ChecksumCache(str(path))
    cache._db.execute("PRAGMA synchronous = OFF")  # a commit a file: fsyncs would take most of the test's time
    return cache


def seed_cache(mod: Any, root: Path, path: Path, roles: dict[str, Path]) -> None:
    """A cache that knows ``cached`` (a hit) and holds for ``stale`` a row of an older agent with another sha256."""
    with open_cache(mod, path) as cache:
        list(mod.scan_root(str(root), checksums=True, cache=cache, warn=lambda message: None))
    db = sqlite3.connect(path)
    keep = {os.stat(roles[name]).st_ino for name in ("cached", "stale")}
    db.execute(f"DELETE FROM checksums WHERE ino NOT IN ({','.join('?' * len(keep))})", tuple(keep))
    db.execute(
        "UPDATE checksums SET sha256 = ?, checksums = NULL, hashed_at = NULL WHERE ino = ?",
        ("0" * 64, os.stat(roles["stale"]).st_ino),
    )
    db.commit()
    db.close()


def cache_rows(path: Path) -> list[tuple]:
    db = sqlite3.connect(path)
    rows = db.execute("SELECT * FROM checksums ORDER BY ino").fetchall() + db.execute("SELECT * FROM roots").fetchall()
    db.close()
    return rows


class Tricks:
    """What the test does to the walk: counts reads and deferrals, changes ``changing`` during its read,
    slows the CRCs of SLOW bytes and fails those of FAILING bytes."""

    def __init__(self, mod: Any, monkeypatch, roles: dict[str, Path]) -> None:
        self.mod = mod
        self.roles = roles
        self.reads: list[int] = []
        self.deferred = 0
        self.changing = os.stat(roles["changing"])
        real_checksum_file, real_compute = mod.checksum_file, mod.crc.CrcPass.compute

        def checksum_file(f, size, **kwargs):
            ino = os.fstat(f.fileno()).st_ino
            self.reads.append(ino)
            sums = real_checksum_file(f, size, **kwargs)
            self.deferred += isinstance(sums, mod.checksums.PendingSums)
            if ino == self.changing.st_ino:  # written to after it was read, before the second fstat
                os.utime(roles["changing"], ns=(self.changing.st_atime_ns, self.changing.st_mtime_ns + 10**9))
            return sums

        def compute(crcs, view, offset):
            if len(view) == SLOW:
                time.sleep(0.05)
            if len(view) == FAILING:
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return real_compute(crcs, view, offset)

        monkeypatch.setattr(mod.cache, "checksum_file", checksum_file)
        monkeypatch.setattr(mod.crc.CrcPass, "compute", compute)

    def walk(self, root: Path, cache_path: Path) -> list[tuple[str, Any]]:
        """The walk's output in order: each line as encoded, each warning."""
        events: list[tuple[str, Any]] = []
        with open_cache(self.mod, cache_path) as cache:
            for line in self.mod.scan_root(
                str(root), checksums=True, cache=cache, warn=lambda message: events.append(("warn", message))
            ):
                events.append(("line", self.mod.encode_line(line)))
        # The file that changed is put back as it was listed, for the next walk.
        os.utime(self.roles["changing"], ns=(self.changing.st_atime_ns, self.changing.st_mtime_ns))
        return events


@pytest.mark.parametrize("bounds", [(64, 16 * MIB), (3, 100 * KIB)], ids=["default-bounds", "tight-bounds"])
def test_the_pipelined_walk_gives_the_sequential_walks_lines_warnings_and_cache(mod, tmp_path, monkeypatch, bounds):
    root = tmp_path / "root"
    roles = mixed_tree(root)
    monkeypatch.setattr(mod.checksums.time, "time", lambda: NOW)
    seed = tmp_path / "seed.sqlite3"
    seed_cache(mod, root, seed, roles)
    tricks = Tricks(mod, monkeypatch, roles)
    files, nbytes = bounds
    monkeypatch.setattr(mod.walk, "PIPELINE_BYTES", nbytes)

    outputs = {}
    for mode, pipeline_files in (("sequential", 0), ("pipelined", files)):
        monkeypatch.setattr(mod.walk, "PIPELINE_FILES", pipeline_files)
        cache_path = tmp_path / f"{mode}.sqlite3"
        shutil.copy(seed, cache_path)
        tricks.reads.clear()
        tricks.deferred = 0
        events = tricks.walk(root, cache_path)
        outputs[mode] = (events, cache_rows(cache_path), sorted(tricks.reads), tricks.deferred)

    events, rows, reads, deferred = outputs["pipelined"]
    assert outputs["sequential"][:3] == (events, rows, reads)
    assert outputs["sequential"][3] == 0
    # Most small files were left to the worker: 3 directories of 12 and of 4 each, besides the tricks'.
    assert deferred >= 3 * 16
    # What the tricks were for happened, in both walks alike.
    warnings = [message for kind, message in events if kind == "warn"]
    assert len(warnings) == 4, warnings
    assert "stale.distcp: content changed without a new mtime" in warnings[0]
    assert "bad\\x01name.bin: file skipped because" in warnings[1]
    assert "changing.distcp: no checksum sent: the file changed while it was read" in warnings[2]
    assert "failing.distcp: no checksum sent: Input/output error" in warnings[3]
    assert os.stat(roles["cached"]).st_ino not in reads  # the cache hit
    assert reads.count(os.stat(roles["slow"]).st_ino) == 1  # its second name found it in the cache
    lines = [json.loads(data) for kind, data in events if kind == "line"]
    assert [line["path"] for line in lines] == sorted(line["path"] for line in lines)
    by_path = {line["path"]: line for line in lines}
    assert "sha256" not in by_path["d1/changing.distcp"]
    assert "sha256" not in by_path["d2/failing.distcp"]
    assert by_path["d2/b-link.distcp"]["sha256"] == by_path["d2/a-linked.distcp"]["sha256"]
    assert by_path["d2/small.pt"]["facts"]["members_checked"] == 2
    assert all("crc32" in line["checksums"] for line in lines if "sha256" in line)
    assert all(line["checksummed_at"] == NOW for line in lines if "sha256" in line)


@pytest.mark.parametrize("pipeline_files", [0, 64], ids=["sequential", "pipelined"])
def test_a_failure_in_the_worker_is_raised_by_the_walk_after_the_lines_before_it(tmp_path, monkeypatch, pipeline_files):
    root = tmp_path / "root"
    for i in range(6):
        write(root / f"{i}.distcp", os.urandom(60 * KIB + i))
    real_compute, real_checksum_file = agent.crc.CrcPass.compute, agent.checksum_file
    threads: set[str] = set()

    def compute(crcs, view, offset):
        threads.add(threading.current_thread().name)
        if len(view) == 60 * KIB + 3:
            raise MemoryError("worker trouble")
        return real_compute(crcs, view, offset)

    def checksum_file(f, size, **kwargs):
        sums = real_checksum_file(f, size, **kwargs)
        time.sleep(0.01)  # a slow read: the worker is never behind, each file goes to it
        return sums

    monkeypatch.setattr(agent.crc.CrcPass, "compute", compute)
    monkeypatch.setattr(agent.cache, "checksum_file", checksum_file)
    monkeypatch.setattr(agent.checksums, "CHECKSUM_BATCH_FILES", 1)
    monkeypatch.setattr(agent.walk, "PIPELINE_FILES", pipeline_files)
    seen: list[str] = []
    with pytest.raises(MemoryError, match="worker trouble"):
        for line in agent.scan_root(str(root), checksums=True):
            assert "sha256" in line
            seen.append(line["path"])
    assert seen == ["0.distcp", "1.distcp", "2.distcp"]
    assert threads == ({"ckptfleet-crc"} if pipeline_files else {threading.current_thread().name})


def test_when_the_worker_is_behind_the_reading_thread_computes_the_next_batches(tmp_path, monkeypatch):
    root = tmp_path / "root"
    for i in range(6):
        write(root / f"{i}.distcp", os.urandom(40 * KIB + i))
    real_compute, real_checksum_file = agent.crc.CrcPass.compute, agent.checksum_file
    gate = threading.Event()  # the worker's core is busy until the last file has been read
    threads: dict[int, str] = {}

    def compute(crcs, view, offset):
        threads[len(view) - 40 * KIB] = threading.current_thread().name
        if threading.current_thread().name == "ckptfleet-crc":
            assert gate.wait(10)
        return real_compute(crcs, view, offset)

    def checksum_file(f, size, **kwargs):
        sums = real_checksum_file(f, size, **kwargs)
        if size == 40 * KIB + 5:
            gate.set()
        return sums

    monkeypatch.setattr(agent.crc.CrcPass, "compute", compute)
    monkeypatch.setattr(agent.cache, "checksum_file", checksum_file)
    monkeypatch.setattr(agent.checksums, "CHECKSUM_BATCH_FILES", 2)
    lines = list(agent.scan_root(str(root), checksums=True))
    here = threading.current_thread().name
    assert threads == {0: "ckptfleet-crc", 1: "ckptfleet-crc", 2: here, 3: here, 4: here, 5: here}
    monkeypatch.setattr(agent.walk, "PIPELINE_FILES", 0)
    assert [{**line, "checksummed_at": 0} for line in lines] == [
        {**line, "checksummed_at": 0} for line in agent.scan_root(str(root), checksums=True)
    ]


def test_at_most_the_bounds_wait_for_their_crcs(tmp_path, monkeypatch):
    root = tmp_path / "root"
    for i in range(30):
        write(root / f"{i:02d}.distcp", os.urandom(40 * KIB))
    monkeypatch.setattr(agent.walk, "PIPELINE_FILES", 5)
    monkeypatch.setattr(agent.walk, "PIPELINE_BYTES", 100 * KIB)  # two files and a half
    waiting: list[int] = []
    most: list[int] = []
    real_init, real_result, real_compute = (
        agent.checksums.PendingSums.__init__,
        agent.checksums.PendingSums.result,
        agent.crc.CrcPass.compute,
    )

    def init(self, *args):
        real_init(self, *args)
        waiting.append(1)
        most.append(len(waiting))

    def result(self):
        waiting.pop()
        return real_result(self)

    def compute(crcs, view, offset):
        time.sleep(0.005)  # a slow worker: the walk is always ahead of it
        return real_compute(crcs, view, offset)

    monkeypatch.setattr(agent.checksums.PendingSums, "__init__", init)
    monkeypatch.setattr(agent.checksums.PendingSums, "result", result)
    monkeypatch.setattr(agent.crc.CrcPass, "compute", compute)
    lines = list(agent.scan_root(str(root), checksums=True))
    assert len(lines) == 30 and all("crc32" in line["checksums"] for line in lines)
    assert max(most) == 3  # the bytes bound: two held, and the one just read
    monkeypatch.setattr(agent.walk, "PIPELINE_BYTES", 16 * MIB)
    most.clear()
    list(agent.scan_root(str(root), checksums=True))
    assert max(most) == 6  # the files bound: five held, and the one just read
    assert waiting == []


def test_a_small_file_that_grows_past_the_inline_limit_while_read_is_read_in_full(tmp_path):
    data = os.urandom(3 * MIB + 11)
    path = write(tmp_path / "a.distcp", data)
    with open(path, "rb", buffering=0) as f:
        sums = agent.checksum_file(f, 1000, later=True)  # listed at 1000 bytes: it grew since
    assert isinstance(sums, agent.FileChecksums)
    assert sums.sha256 == hashlib.sha256(data).hexdigest()
    assert sums.checksums["crc32"] == format(zlib.crc32(data), "08x")
    with open(path, "rb", buffering=0) as f:
        assert sums.checksums == agent.checksum_file(f, 1000).checksums
