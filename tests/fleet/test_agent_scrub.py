"""Scrubbing: re-reading the files whose cached checksums are oldest, to find what bit rot changed.

Real files and a real cache file; the ages of cached checksums are set in the cache directly.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from fleet import agent

MIB = 1024 * 1024


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def counted_hashing(monkeypatch):
    """The names of the files read for their checksums, in order."""
    hashed: list[str] = []
    real = agent.checksum_file

    def checksum_file(f, size, **kwargs):
        hashed.append(os.path.basename(os.readlink(f"/proc/self/fd/{f.fileno()}")))
        return real(f, size, **kwargs)

    monkeypatch.setattr(agent.cache, "checksum_file", checksum_file)
    return hashed


@pytest.fixture
def slept(monkeypatch):
    """The throttle's sleeps, recorded instead of slept (the clock moves on by as much)."""
    naps: list[float] = []
    real = agent.checksums.time.monotonic
    monkeypatch.setattr(agent.checksums.time, "sleep", naps.append)
    monkeypatch.setattr(agent.checksums.time, "monotonic", lambda: real() + sum(naps))
    return naps


def scan(root: Path, cache_path: Path, **cache_kwargs) -> tuple[dict[str, dict], list[str]]:
    warnings: list[str] = []
    with agent.ChecksumCache(str(cache_path), **cache_kwargs) as cache:
        lines = {
            line["path"]: line for line in agent.scan_root(str(root), checksums=True, cache=cache, warn=warnings.append)
        }
    return lines, warnings


def age(cache_path: Path, root: Path, ages: dict[str, float]) -> None:
    """Set when each named file's checksums were taken, as if they had been read back then."""
    db = sqlite3.connect(cache_path)
    for name, hashed_at in ages.items():
        st = os.stat(root / name)
        db.execute(
            "UPDATE checksums SET hashed_at = ? WHERE dev = ? AND ino = ? AND size = ? AND mtime_ns = ?",
            (hashed_at, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns),
        )
    db.commit()
    db.close()


@pytest.fixture
def ten_files(tmp_path) -> Path:
    root = tmp_path / "root"
    for i in range(10):
        write(root / f"shard-{i}.distcp", bytes([i]) * 100_000)
    return root


def test_a_scrub_rereads_the_oldest_checksummed_share_of_the_roots_bytes(ten_files, tmp_path, counted_hashing, slept):
    cache_path = tmp_path / "c.sqlite3"
    scan(ten_files, cache_path)
    assert len(counted_hashing) == 10
    # shard-7, -2 and -5 were verified longest ago; the rest more recently.
    age(cache_path, ten_files, {f"shard-{i}.distcp": 1_700_000_000.0 + i * 1000 for i in range(10)})
    age(cache_path, ten_files, {"shard-7.distcp": 1_600_000_000.0, "shard-2.distcp": 1_600_000_100.0,
                                "shard-5.distcp": 1_600_000_200.0})  # fmt: skip
    counted_hashing.clear()

    lines, warnings = scan(ten_files, cache_path, scrub_share=0.3)

    assert sorted(counted_hashing) == ["shard-2.distcp", "shard-5.distcp", "shard-7.distcp"]
    assert warnings == []
    for name, line in lines.items():
        if name in counted_hashing:
            assert line["checksummed_at"] > 1_700_100_000  # just now
        else:
            assert line["checksummed_at"] == 1_700_000_000.0 + int(name[6]) * 1000
        assert line["sha256"] == hashlib.sha256((ten_files / name).read_bytes()).hexdigest()
    # The next run goes on with the next-oldest, not the same three.
    counted_hashing.clear()
    scan(ten_files, cache_path, scrub_share=0.3)
    assert sorted(counted_hashing) == ["shard-0.distcp", "shard-1.distcp", "shard-3.distcp"]


def test_no_scrub_without_a_share_and_none_on_a_roots_first_walk(ten_files, tmp_path, counted_hashing, slept):
    cache_path = tmp_path / "c.sqlite3"
    scan(ten_files, cache_path, scrub_share=0.5)
    assert len(counted_hashing) == 10  # all new: read once, unthrottled
    assert slept == []
    scan(ten_files, cache_path)
    assert len(counted_hashing) == 10


def test_files_gone_from_the_root_do_not_use_up_the_scrub(ten_files, tmp_path, counted_hashing, slept):
    cache_path = tmp_path / "c.sqlite3"
    scan(ten_files, cache_path)
    age(cache_path, ten_files, {f"shard-{i}.distcp": 1_600_000_000.0 + i for i in range(10)})
    for i in range(5):  # the five oldest are deleted; their rows stay in the cache for 90 days
        (ten_files / f"shard-{i}.distcp").unlink()
    scan(ten_files, cache_path)  # a walk that no longer sees them
    counted_hashing.clear()

    scan(ten_files, cache_path, scrub_share=0.4)

    assert sorted(counted_hashing) == ["shard-5.distcp", "shard-6.distcp"]  # 40% of the five left


def test_a_scrub_that_finds_other_content_under_the_same_mtime_warns_and_sends_the_new(tmp_path, slept):
    root = tmp_path / "root"
    path = write(root / "model.safetensors", b"\x00" * 300_000)
    cache_path = tmp_path / "c.sqlite3"
    before = scan(root, cache_path)[0]["model.safetensors"]
    st = os.stat(path)
    with open(path, "r+b") as f:  # one bit flips; size and mtime stay
        f.seek(123_456)
        f.write(b"\x08")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    lines, warnings = scan(root, cache_path)
    assert lines["model.safetensors"]["sha256"] == before["sha256"]  # the cache cannot know

    lines, warnings = scan(root, cache_path, scrub_share=1.0)
    line = lines["model.safetensors"]
    assert line["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest() != before["sha256"]
    assert line["checksums"]["crc32"] != before["checksums"]["crc32"]
    assert len(warnings) == 1
    assert "model.safetensors: content changed without a new mtime: bit rot or an in-place write" in warnings[0]
    # The cache now holds the new values.
    lines, warnings = scan(root, cache_path)
    assert lines["model.safetensors"]["sha256"] == line["sha256"]
    assert warnings == []


def test_scrub_reads_are_throttled_to_the_rate_and_first_reads_are_not(tmp_path, slept):
    root = tmp_path / "root"
    write(root / "a.distcp", os.urandom(4 * MIB))
    cache_path = tmp_path / "c.sqlite3"
    scan(root, cache_path, scrub_share=1.0, scrub_rate=2 * MIB)
    assert slept == []  # first-time hashing runs at full speed

    scan(root, cache_path, scrub_share=1.0, scrub_rate=2 * MIB)

    # 4 MiB at 2 MiB/s: about two seconds of pauses (less the time the reads themselves took).
    assert 1.5 < sum(slept) <= 2.0
    assert len(slept) == 4  # paced after every 1 MiB read, never in one long stall


def test_the_command_line_scrubs_with_share_and_rate(ten_files, tmp_path, capsys, counted_hashing, slept):
    cache = str(tmp_path / "c.sqlite3")
    base = ["--dry-run", "--checksums", "--cache", cache, "--root", str(ten_files)]
    assert agent.main(base) == 0
    age(tmp_path / "c.sqlite3", ten_files, {"shard-4.distcp": 1_600_000_000.0})
    capsys.readouterr()
    counted_hashing.clear()

    assert agent.main([*base, "--scrub-share", "0.1", "--scrub-rate", "50"]) == 0

    out, err = capsys.readouterr()
    assert counted_hashing == ["shard-4.distcp"]
    assert "scrubbing: re-reading the 10.0% of each root's bytes checksummed longest ago, at most 50 MiB/s" in err
    files = [json.loads(text) for text in out.splitlines() if '"type":"file"' in text]
    assert all("checksummed_at" in f for f in files)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scrub-share", "0.05"], "--scrub-share needs --checksums"),
        (["--checksums", "--scrub-share", "1.5"], "must be between 0 and 1"),
        (["--checksums", "--scrub-share", "lots"], "not a number"),
        (["--checksums", "--scrub-rate", "0"], "must be a positive number"),
    ],
)
def test_bad_scrub_options_are_usage_errors(tmp_path, capsys, args, message):
    assert agent.main(["--dry-run", "--root", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_help_explains_the_scrub_options(capsys):
    assert agent.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--scrub-share FRACTION" in out
    assert "--scrub-rate MIB_PER_S" in out
    assert "crc32c and crc64nvme" in " ".join(out.split())
