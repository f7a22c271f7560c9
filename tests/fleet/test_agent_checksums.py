"""The agent's CRCs: exact values against zlib, hashlib and awscrt, the block CRCs rebuilding what S3
stores for a boto3 multipart upload, the torch zip member check, the cache, and running without awscrt.

Real files on disk, the real agent functions (``scan_root``, ``inventory_lines``, ``main --dry-run``).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import pickle
import sqlite3
import time
import zipfile
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet import agent
from tests.agent_build import fresh_agent

try:
    from awscrt import checksums as crt
except ImportError:  # the agent's tests must pass where the optional module is missing too
    crt = None

MIB = 1024 * 1024
needs_crt = pytest.mark.skipif(crt is None, reason="awscrt is not installed")


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def lines_of(root: Path, **kwargs: Any) -> dict[str, dict[str, Any]]:
    return {line["path"]: line for line in agent.scan_root(str(root), checksums=True, **kwargs)}


def be(value: int, width: int = 4) -> bytes:
    return value.to_bytes(width, "big")


def blocks_of(line: dict[str, Any], algo: str = "crc32") -> list[int]:
    raw = base64.b64decode(line["checksums"]["blocks"][algo])
    return [int.from_bytes(raw[i : i + 4], "big") for i in range(0, len(raw), 4)]


@pytest.fixture
def counted_hashing(monkeypatch):
    """Every read of a file for its checksums, by inode."""
    hashed: list[int] = []
    real = agent.checksum_file

    def checksum_file(f, size, **kwargs):
        hashed.append(os.fstat(f.fileno()).st_ino)
        return real(f, size, **kwargs)

    monkeypatch.setattr(agent.cache, "checksum_file", checksum_file)
    return hashed


# --- combining CRCs -------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_crc_combine_gives_the_crc32_of_the_concatenation(a, b):
    assert agent.crc_combine("crc32", zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


@needs_crt
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_crc_combine_gives_the_crc32c_and_crc64nvme_of_the_concatenation(a, b):
    assert agent.crc_combine("crc32c", crt.crc32c(a), crt.crc32c(b), len(b)) == crt.crc32c(a + b)
    assert agent.crc_combine("crc64nvme", crt.crc64nvme(a), crt.crc64nvme(b), len(b)) == crt.crc64nvme(a + b)


def test_crc_combine_handles_long_lengths_without_the_data():
    # crc(A + 10 MiB of zeros) from crc(A) and the CRC of the zeros, computed by zlib the long way.
    zeros = bytes(10 * MIB + 3)
    a = b"checkpoint"
    assert agent.crc_combine("crc32", zlib.crc32(a), zlib.crc32(zeros), len(zeros)) == zlib.crc32(a + zeros)


@pytest.mark.parametrize("mib", [1, 2, 8])
def test_crc_combine_over_whole_mib_uses_tables_that_agree_with_the_long_way(mib):
    tail = os.urandom(mib * MIB)
    for head in (b"", b"x", os.urandom(1000)):
        assert agent.crc_combine("crc32", zlib.crc32(head), zlib.crc32(tail), len(tail)) == zlib.crc32(head + tail)
        if crt is not None:
            got = agent.crc_combine("crc64nvme", crt.crc64nvme(head), crt.crc64nvme(tail), len(tail))
            assert got == crt.crc64nvme(head + tail)
            got = agent.crc_combine("crc32c", crt.crc32c(head), crt.crc32c(tail), len(tail))
            assert got == crt.crc32c(head + tail)


def test_crc_combine_refuses_an_unknown_algorithm():
    with pytest.raises(ValueError, match="unknown CRC"):
        agent.crc_combine("md5", 1, 2, 3)


def test_crc_of_blocks_refuses_parts_that_cut_through_blocks():
    with pytest.raises(ValueError, match="not a multiple of the block size"):
        agent.crc_of_blocks("crc32", [1, 2, 3], MIB, 3 * MIB, 5 * MIB + 1)
    with pytest.raises(ValueError, match="do not make a file"):
        agent.crc_of_blocks("crc32", [1, 2], MIB, 3 * MIB, 2 * MIB)


def boto3_part_size(size: int) -> int:
    """s3transfer's ChunksizeAdjuster with boto3's defaults: 8 MiB, doubled while over 10,000 parts."""
    part = 8 * MIB
    while -(-size // part) > 10_000:
        part *= 2
    return part


@pytest.mark.parametrize(
    ("size", "block"),
    [(0, MIB), (1, MIB), (10_000 * MIB, MIB), (10_000 * MIB + 1, 2 * MIB), (20_000 * MIB + 1, 4 * MIB),
     (5 * 1024**4, 1024 * MIB)],
)  # fmt: skip
def test_the_block_size_is_a_power_of_two_mib_that_divides_boto3s_part_size(size, block):
    assert agent.crc_block_size(size) == block
    assert -(-size // block) <= 10_000
    assert boto3_part_size(size) % block == 0


# --- the CRCs a scan sends ------------------------------------------------------------------------


def test_a_scan_sends_the_exact_crcs_of_each_file_and_block_crcs_only_above_one_block(tmp_path):
    root = tmp_path / "root"
    files = {
        "empty": b"",
        "small.json": b'{"step": 1}',
        "one-block.distcp": os.urandom(MIB),
        "shard.distcp": os.urandom(2 * MIB + 12345),
    }
    for name, data in files.items():
        write(root / name, data)

    lines = lines_of(root)

    for name, data in files.items():
        line = lines[name]
        assert line["sha256"] == hashlib.sha256(data).hexdigest()
        sums = line["checksums"]
        assert sums["crc32"] == be(zlib.crc32(data)).hex()
        if crt is not None:
            assert sums["crc32c"] == be(crt.crc32c(data)).hex()
            assert sums["crc64nvme"] == be(crt.crc64nvme(data), 8).hex()
            assert set(sums) - {"blocks"} == {"crc32", "crc32c", "crc64nvme"}
        assert ("blocks" in sums) == (len(data) > MIB), name
    assert lines["empty"]["checksums"]["crc32"] == "00000000"
    shard = files["shard.distcp"]
    blocks = lines["shard.distcp"]["checksums"]["blocks"]
    assert blocks["size"] == MIB
    assert base64.b64decode(blocks["crc32"]) == b"".join(be(zlib.crc32(shard[i : i + MIB])) for i in (0, MIB, 2 * MIB))
    if crt is not None:
        assert base64.b64decode(blocks["crc32c"]) == b"".join(
            be(crt.crc32c(shard[i : i + MIB])) for i in (0, MIB, 2 * MIB)
        )


def test_the_block_crcs_rebuild_the_composite_checksum_s3_keeps_for_a_boto3_multipart_upload(tmp_path):
    data = os.urandom(20 * MIB + 4321)  # over boto3's 8 MiB threshold: three parts of 8, 8 and 4+ MiB
    line = lines_of(write(tmp_path / "root" / "model.safetensors", data).parent)["model.safetensors"]
    part = boto3_part_size(len(data))
    # What S3 computes on CompleteMultipartUpload: the CRC of the parts' big-endian CRCs, "-3".
    parts = [data[i : i + part] for i in range(0, len(data), part)]
    expected = base64.b64encode(be(zlib.crc32(b"".join(be(zlib.crc32(p)) for p in parts)))).decode()

    block = line["checksums"]["blocks"]["size"]
    rebuilt = agent.crc_of_blocks("crc32", blocks_of(line), block, len(data), part)
    assert len(rebuilt) == 3
    assert base64.b64encode(be(zlib.crc32(b"".join(be(c) for c in rebuilt)))).decode() == expected
    # The whole file's CRC is the blocks combined into one part.
    assert agent.crc_of_blocks("crc32", blocks_of(line), block, len(data), 32 * MIB) == [zlib.crc32(data)]
    if crt is not None:
        rebuilt_c = agent.crc_of_blocks("crc32c", blocks_of(line, "crc32c"), block, len(data), part)
        assert rebuilt_c == [crt.crc32c(p) for p in parts]


def test_a_file_of_more_than_the_block_limit_gets_larger_blocks(tmp_path, monkeypatch):
    # 10,000 blocks need a 10 GB file; with a limit of 4 the same rule applies to 9 MiB.
    monkeypatch.setattr(agent.crc, "CRC_MAX_BLOCKS", 4)
    data = os.urandom(9 * MIB + 1)
    line = lines_of(write(tmp_path / "root" / "big.distcp", data).parent)["big.distcp"]
    blocks = line["checksums"]["blocks"]
    assert blocks["size"] == 4 * MIB
    assert blocks_of(line) == [zlib.crc32(data[i : i + 4 * MIB]) for i in range(0, len(data), 4 * MIB)]
    assert line["checksums"]["crc32"] == be(zlib.crc32(data)).hex()


def test_every_line_with_checksums_says_when_they_were_taken(tmp_path, counted_hashing):
    root = tmp_path / "root"
    write(root / "a.distcp", b"a" * 1000)
    before = time.time()
    with agent.ChecksumCache(str(tmp_path / "c.sqlite3")) as cache:
        (first,) = agent.scan_root(str(root), checksums=True, cache=cache)
        time.sleep(0.01)
        (again,) = agent.scan_root(str(root), checksums=True, cache=cache)
    assert before - 0.01 <= first["checksummed_at"] <= time.time()
    assert again["checksummed_at"] == first["checksummed_at"]  # from the cache: when it was read
    assert len(counted_hashing) == 1
    (plain,) = agent.scan_root(str(root))
    assert "checksummed_at" not in plain
    assert "checksums" not in plain


def test_the_crcs_come_from_the_same_single_read_as_sha256(tmp_path, monkeypatch):
    reads: list[int] = []
    real = agent.facts.open_regular

    def counting_open(path):
        reads.append(1)
        return real(path)

    # Every open of a file the walk makes: for its facts, and for its checksums.
    monkeypatch.setattr(agent.facts, "open_regular", counting_open)
    monkeypatch.setattr(agent.cache, "open_regular", counting_open)
    write(tmp_path / "root" / "__0_0.distcp", os.urandom(3 * MIB))
    list(agent.scan_root(str(tmp_path / "root"), checksums=True))
    assert len(reads) == 1  # a .distcp has no facts: the one open is the checksum pass


def test_a_failure_computing_crcs_is_raised_by_the_reading_thread_which_then_goes_on(tmp_path, monkeypatch):
    data = os.urandom(6 * MIB)
    path = write(tmp_path / "a.distcp", data)
    real = agent.crc.CrcPass.compute
    calls: list[int] = []

    def compute(self, view, offset):
        calls.append(offset)
        if len(calls) == 2:
            raise MemoryError("worker trouble")
        return real(self, view, offset)

    monkeypatch.setattr(agent.crc.CrcPass, "compute", compute)
    with open(path, "rb", buffering=0) as f, pytest.raises(MemoryError, match="worker trouble"):
        agent.checksum_file(f, len(data))
    with open(path, "rb", buffering=0) as f:
        sums = agent.checksum_file(f, len(data))
    assert sums.checksums["crc32"] == be(zlib.crc32(data)).hex()
    assert sums.sha256 == hashlib.sha256(data).hexdigest()


def test_dry_run_with_checksums_says_once_which_algorithms_it_computes(tmp_path, capsys):
    for name in ("one", "two"):
        write(tmp_path / name / "x.bin", b"x" * 10)
    code = agent.main(
        ["--dry-run", "--checksums", "--cache", str(tmp_path / "c.sqlite3"),
         "--root", str(tmp_path / "one"), "--root", str(tmp_path / "two")]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err.count("checksums: sha256, crc32") == 1
    files = [json.loads(text) for text in out.splitlines() if '"type":"file"' in text]
    assert [f["checksums"]["crc32"] for f in files] == [be(zlib.crc32(b"x" * 10)).hex()] * 2
    assert all(isinstance(f["checksummed_at"], float) for f in files)
    if crt is not None:
        assert "ckptfleet-agent: checksums: sha256, crc32, crc32c, crc64nvme\n" in err


# --- without awscrt -------------------------------------------------------------------------------


@pytest.fixture
def agent_without_crt(monkeypatch):
    """A fresh copy of the agent's package loaded where ``import awscrt`` fails, as on a bare GPU host."""
    return fresh_agent(monkeypatch, "agent_without_crt", without_awscrt=True)


def test_without_awscrt_the_agent_sends_crc32_and_says_what_it_lacks(agent_without_crt, tmp_path, capsys):
    bare = agent_without_crt
    assert bare.crc._crt is None
    assert bare.CRC_ALGORITHMS == ("crc32",)
    data = os.urandom(2 * MIB + 5)
    root = write(tmp_path / "root" / "a.distcp", data).parent

    code = bare.main(["--dry-run", "--checksums", "--cache", str(tmp_path / "c.sqlite3"), "--root", str(root)])

    out, err = capsys.readouterr()
    assert code == 0, err
    (line,) = [json.loads(text) for text in out.splitlines() if '"type":"file"' in text]
    assert line["sha256"] == hashlib.sha256(data).hexdigest()
    assert line["checksums"] == {
        "crc32": be(zlib.crc32(data)).hex(),
        "blocks": {"size": MIB, "crc32": line["checksums"]["blocks"]["crc32"]},
    }
    assert blocks_of(line) == [zlib.crc32(data[i : i + MIB]) for i in range(0, len(data), MIB)]
    assert err == (
        "ckptfleet-agent: checksums: sha256, crc32 "
        "(crc32c and crc64nvme need the optional module awscrt: pip install awscrt)\n"
    )
    # Pure Python combining needs no awscrt either.
    assert bare.crc_combine("crc32c", 0xE3069283, 0, 0) == 0xE3069283


@needs_crt
def test_a_cache_row_without_crc32c_is_read_again_once_awscrt_is_there(agent_without_crt, tmp_path, counted_hashing):
    root = write(tmp_path / "root" / "a.distcp", b"abc" * 1000).parent
    cache_path = str(tmp_path / "c.sqlite3")
    with agent_without_crt.ChecksumCache(cache_path) as cache:
        list(agent_without_crt.scan_root(str(root), checksums=True, cache=cache))
    with agent.ChecksumCache(cache_path) as cache:
        (line,) = agent.scan_root(str(root), checksums=True, cache=cache)
        (again,) = agent.scan_root(str(root), checksums=True, cache=cache)
    assert line["checksums"]["crc32c"] == be(crt.crc32c(b"abc" * 1000)).hex()
    assert again == line
    assert len(counted_hashing) == 1


# --- torch zip members ----------------------------------------------------------------------------


def torch_zip(path: Path, *, storage: bytes | None = None, deflated: bool = True) -> Path:
    """A zip in torch.save's layout (STORED data.pkl and storages), plus one DEFLATED member unless not
    ``deflated`` (a file with one is CRC'd on the reading thread only; without, on both threads)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"step": 100, "weights": "archive/data/0"}))
        zf.writestr("archive/data/0", storage if storage is not None else os.urandom(2 * MIB + 777))
        zf.writestr("archive/data/1", os.urandom(300))
        zf.writestr("archive/version", "3\n")
        if deflated:
            zf.writestr("archive/extra.txt", b"compressible " * 50_000, compress_type=zipfile.ZIP_DEFLATED)
    return path


def member_data_offset(path: Path, name: str) -> int:
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name)
    with open(path, "rb") as f:
        f.seek(info.header_offset + 26)
        n, e = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
    return info.header_offset + 30 + n + e


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x5A]))


def test_a_sound_torch_zip_has_every_member_checked(tmp_path):
    path = torch_zip(tmp_path / "root" / "model.pt")
    (line,) = agent.scan_root(str(path.parent), checksums=True)
    assert line["facts"] == {
        "kind": "torch_file", "container": "zip", "complete": True, "members_checked": 5, "members_bad": [],
    }  # fmt: skip
    assert line["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert line["checksums"]["crc32"] == be(zlib.crc32(path.read_bytes())).hex()
    # Without --checksums the facts are what they always were.
    (plain,) = agent.scan_root(str(path.parent))
    assert plain["facts"] == {"kind": "torch_file", "container": "zip", "complete": True}


@pytest.mark.parametrize("member", ["archive/data/0", "archive/data/1", "archive/extra.txt"])
def test_a_flipped_byte_inside_a_member_names_that_member(tmp_path, member):
    path = torch_zip(tmp_path / "root" / "optimizer.bin")
    flip_byte(path, member_data_offset(path, member) + 100)
    (line,) = agent.scan_root(str(path.parent), checksums=True)
    assert line["facts"]["members_checked"] == 5
    assert line["facts"]["members_bad"] == [member]
    # The CRCs of the file are of its bytes as they are, flipped byte and all.
    assert line["checksums"]["crc32"] == be(zlib.crc32(path.read_bytes())).hex()
    assert blocks_of(line) == [zlib.crc32(path.read_bytes()[i : i + MIB]) for i in range(0, path.stat().st_size, MIB)]


@pytest.mark.parametrize("deflated", [True, False], ids=["one-thread", "two-threads"])
def test_members_are_checked_across_buffer_and_block_boundaries(tmp_path, deflated):
    # A storage of 3.5 MiB starts mid-buffer and spans four of them; zeros make a flip anywhere count.
    path = torch_zip(tmp_path / "root" / "rng_state.pth", storage=bytes(3 * MIB + MIB // 2), deflated=deflated)
    start = member_data_offset(path, "archive/data/0")
    for offset in (start, start + MIB - (start % MIB), start + 3 * MIB + MIB // 2 - 1):
        flip_byte(path, offset)
        (line,) = agent.scan_root(str(path.parent), checksums=True)
        assert line["facts"]["members_bad"] == ["archive/data/0"], offset
        flip_byte(path, offset)
        (line,) = agent.scan_root(str(path.parent), checksums=True)
        assert line["facts"]["members_bad"] == [], offset


class ShortReads(io.RawIOBase):
    """A file that gives at most ``most`` bytes a read, as a network file system may."""

    def __init__(self, data: bytes, most: int) -> None:
        self.data, self.most, self.pos = data, most, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self.most, len(self.data) - self.pos)
        buffer[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


def test_short_reads_that_straddle_blocks_and_members_give_the_same_crcs(tmp_path):
    path = torch_zip(tmp_path / "model.pt", deflated=False)
    data = path.read_bytes()
    with open(path, "rb") as f:
        members = agent.zip_members(f, len(data))
    flip = member_data_offset(path, "archive/data/0") + MIB + 7
    damaged = data[:flip] + bytes([data[flip] ^ 1]) + data[flip + 1 :]
    sums = agent.checksum_file(ShortReads(damaged, 300_001), len(damaged), members=members)
    assert sums.checksums["crc32"] == be(zlib.crc32(damaged)).hex()
    raw = base64.b64decode(sums.checksums["blocks"]["crc32"])
    assert raw == b"".join(be(zlib.crc32(damaged[i : i + MIB])) for i in range(0, len(damaged), MIB))
    if crt is not None:
        assert sums.checksums["crc32c"] == be(crt.crc32c(damaged)).hex()
        assert sums.checksums["crc64nvme"] == be(crt.crc64nvme(damaged), 8).hex()
    assert sums.members == {"checked": 4, "bad": ["archive/data/0"]}


def test_members_bad_names_at_most_ten(tmp_path):
    path = tmp_path / "root" / "many.pt"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(12):
            zf.writestr(f"archive/data/{i}", bytes(1000))
    for i in range(12):
        flip_byte(path, member_data_offset(path, f"archive/data/{i}"))
    (line,) = agent.scan_root(str(path.parent), checksums=True)
    assert line["facts"]["members_checked"] == 12
    assert line["facts"]["members_bad"] == [f"archive/data/{i}" for i in range(10)]


def test_a_zip64_torch_file_is_checked(tmp_path, monkeypatch):
    # zipfile writes ZIP64 records and extra fields once sizes pass ZIP64_LIMIT; lower it to see them.
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 1000)
    path = torch_zip(tmp_path / "root" / "big.pt")
    data = path.read_bytes()
    assert b"PK\x06\x06" in data[-200:] and b"PK\x06\x07" in data[-200:]
    (line,) = agent.scan_root(str(path.parent), checksums=True)
    assert line["facts"]["complete"] is True
    assert (line["facts"]["members_checked"], line["facts"]["members_bad"]) == (5, [])
    flip_byte(path, member_data_offset(path, "archive/data/1") + 5)
    (line,) = agent.scan_root(str(path.parent), checksums=True)
    assert line["facts"]["members_bad"] == ["archive/data/1"]


def test_a_truncated_torch_zip_gets_no_member_check(tmp_path):
    data = torch_zip(tmp_path / "whole.pt").read_bytes()
    path = write(tmp_path / "root" / "cut.pt", data[: len(data) - 5000])
    (line,) = agent.scan_root(str(path.parent), checksums=True)
    assert line["facts"] == {"kind": "torch_file", "container": "zip", "complete": False}
    assert line["sha256"] == hashlib.sha256(data[: len(data) - 5000]).hexdigest()


def test_the_member_check_is_cached_with_the_checksums(tmp_path, counted_hashing):
    path = torch_zip(tmp_path / "root" / "model.pt")
    flip_byte(path, member_data_offset(path, "archive/data/0"))
    with agent.ChecksumCache(str(tmp_path / "c.sqlite3")) as cache:
        (first,) = agent.scan_root(str(path.parent), checksums=True, cache=cache)
    with agent.ChecksumCache(str(tmp_path / "c.sqlite3")) as cache:
        (second,) = agent.scan_root(str(path.parent), checksums=True, cache=cache)
    assert len(counted_hashing) == 1
    assert second == first
    assert second["facts"]["members_bad"] == ["archive/data/0"]


# --- the cache ------------------------------------------------------------------------------------


def old_cache(path: Path) -> sqlite3.Connection:
    """A cache file as the agent before CRCs wrote it."""
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE checksums (dev INTEGER NOT NULL, ino INTEGER NOT NULL, size INTEGER NOT NULL, "
        "mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL, last_seen INTEGER NOT NULL, "
        "PRIMARY KEY (dev, ino, size, mtime_ns)) WITHOUT ROWID"
    )
    return db


def test_an_old_cache_is_migrated_in_place_and_its_files_read_once_more(tmp_path, counted_hashing):
    root = tmp_path / "root"
    data = os.urandom(5000)
    st = os.stat(write(root / "a.distcp", data))
    cache_path = tmp_path / "c.sqlite3"
    db = old_cache(cache_path)
    db.execute(
        "INSERT INTO checksums VALUES (?, ?, ?, ?, ?, ?)",
        (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, hashlib.sha256(data).hexdigest(), int(time.time())),
    )
    db.commit()
    db.close()

    with agent.ChecksumCache(str(cache_path)) as cache:
        (first,) = agent.scan_root(str(root), checksums=True, cache=cache)
    with agent.ChecksumCache(str(cache_path)) as cache:
        (second,) = agent.scan_root(str(root), checksums=True, cache=cache)

    assert len(counted_hashing) == 1
    assert first == second
    assert first["checksums"]["crc32"] == be(zlib.crc32(data)).hex()
    db = sqlite3.connect(cache_path)
    (checksums_json, hashed_at, root_seen) = db.execute("SELECT checksums, hashed_at, root FROM checksums").fetchone()
    assert json.loads(checksums_json) == first["checksums"]
    assert hashed_at == first["checksummed_at"]
    assert root_seen == str(root)


def test_a_file_that_changes_while_read_is_sent_without_any_checksum(tmp_path, monkeypatch):
    path = write(tmp_path / "root" / "growing.distcp", os.urandom(MIB))
    real = agent.checksum_file

    def checksum_file(f, size, **kwargs):
        sums = real(f, size, **kwargs)
        with open(path, "ab") as out:
            out.write(b"more")
        return sums

    monkeypatch.setattr(agent.cache, "checksum_file", checksum_file)
    warnings: list[str] = []
    with agent.ChecksumCache(str(tmp_path / "c.sqlite3")) as cache:
        (line,) = agent.scan_root(str(path.parent), checksums=True, cache=cache, warn=warnings.append)
        assert cache.get(os.stat(path)) is None
    assert not {"sha256", "checksums", "checksummed_at"} & set(line)
    assert "changed while it was read" in warnings[0]


def test_an_inventory_carries_the_checksums_through_to_its_lines(tmp_path):
    data = os.urandom(1500)
    root = write(tmp_path / "root" / "a.distcp", data).parent
    lines = list(agent.inventory_lines(str(root), "gpu-a01", checksums=True))
    assert [line["type"] for line in lines] == ["header", "file", "end"]
    assert lines[1]["checksums"]["crc32"] == be(zlib.crc32(data)).hex()
    assert json.loads(agent.encode_line(lines[1])) == lines[1]
