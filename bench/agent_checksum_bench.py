#!/usr/bin/env python3
"""Agent checksum benchmark: the walk ``scan_root --checksums`` makes (sha256 + CRCs + torch zip member
check) next to the sha256-only walk the agent made before, over the same files, measured in the same run.

The files are written once into a temporary directory (a few large shards and a torch.save-style zip
of many STORED storages in ``large/``, many small files in ``small/``) and read once before timing, so
every pass reads from a warm page cache and the figures are the CPU and threading cost of hashing, not
the disk's. Each pass walks ``large/`` and then ``small/`` with ``fleet.agent.scan_root(checksums=True)``
(no cache), timed apart and summed:

- baseline: the walk before CRCs exactly (facts, then open, fstat, ``sha256_file`` in 1 MiB reads,
  fstat): ``checksum_file`` is swapped for ``sha256_file``, ``zip_members`` for nothing, and the
  pipeline is off;
- new: ``scan_root`` as it is: large files CRC'd on the worker thread buffer by buffer, small files
  (below ``CHECKSUM_INLINE_BYTES``) read whole and CRC'd by the worker while the walk reads on;
- sequential: the same with the pipeline off (``PIPELINE_FILES = 0``): small files CRC'd on the
  walking thread, as before the pipeline;
- one thread: everything on the walking thread, to show what the worker buys.

Rounds alternate (baseline, new, sequential, one thread, baseline, ...), so a neighbour's load falls on
all alike; the ratio of the medians is the figure. On a machine whose other core is busy the worker has
no core to run on, and the new pass costs what its CPU does (about sha256 + crc32, 1.7-1.9x); the bench
prints the load average. The new pass's lines are checked against the sequential pass's (all but
``checksummed_at``) after the first round.

    .venv/bin/python bench/agent_checksum_bench.py                  # 2 GiB, 3 rounds each
    .venv/bin/python bench/agent_checksum_bench.py --gib 0.5 --rounds 5
    .venv/bin/python bench/agent_checksum_bench.py --no-awscrt      # as on a host without awscrt

Options: ``--gib N`` (total size), ``--rounds N``, ``--no-awscrt`` (import the agent where awscrt
cannot be imported: crc32 only), ``--keep DIR`` (write and keep the files there), ``--json FILE``.
The target (issue 13): the new pass within 1.15x the wall time of the baseline.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MIB = 1024 * 1024


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def build(directory: Path, total: int) -> list[Path]:
    """About ``total`` bytes: 60% in three large shards and 25% in one torch zip (in ``large/``), 15% in
    128 KiB files (in ``small/``)."""
    large_dir, small_dir = directory / "large", directory / "small"
    large_dir.mkdir(parents=True, exist_ok=True)
    small_dir.mkdir(exist_ok=True)
    files: list[Path] = []
    block = os.urandom(4 * MIB)

    def fill(path: Path, size: int) -> None:
        with open(path, "wb") as f:
            left = size
            while left > 0:
                f.write(block[: min(left, len(block))])
                left -= len(block)
        files.append(path)

    large = int(total * 0.6) // 3
    for i in range(3):
        fill(large_dir / f"__{i}_0.distcp", large + i * 12345)  # sizes not a multiple of 1 MiB
    zip_path = large_dir / "model_states.pt"
    storages = 200
    per_storage = int(total * 0.25) // storages
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", os.urandom(20_000))
        for i in range(storages):
            with zf.open(f"archive/data/{i}", "w", force_zip64=True) as member:
                left = per_storage + i * 64
                while left > 0:
                    member.write(block[: min(left, len(block))])
                    left -= len(block)
        zf.writestr("archive/version", "3\n")
    files.append(zip_path)
    small = 128 * 1024
    for i in range(int(total * 0.15) // small):
        fill(small_dir / f"rank{i:05d}.bin", small)
    return sorted(files)


def warm(files: list[Path]) -> None:
    buffer = bytearray(MIB)
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass


class Walks:
    """The passes: each walks a root with ``scan_root(checksums=True)`` as the agent is set up for it."""

    def __init__(self, agent) -> None:
        self.agent = agent
        self.lines: dict[str, dict[str, list[dict]]] = {}  # the last lines of each pass, by root

    def walk(self, name: str, root: Path) -> int:
        warnings: list[str] = []
        lines = list(self.agent.scan_root(str(root), checksums=True, warn=warnings.append))
        if warnings:
            raise SystemExit(f"{name}: the walk warned: {warnings[:3]}")
        for line in lines:
            if "sha256" not in line or line.get("facts", {}).get("members_bad"):
                raise SystemExit(f"{name}: {line['path']}: no checksum or bad members: {line}")
        self.lines.setdefault(name, {})[str(root)] = lines
        return len(lines)

    @contextlib.contextmanager
    def patched(self, values: dict[str, object]):
        """Set ``{"module.name": value}`` in the agent's modules (where each name is looked up) meanwhile."""
        where = {key: (getattr(self.agent, key.split(".")[0]), key.split(".")[1]) for key in values}
        old = {key: getattr(module, name) for key, (module, name) in where.items()}
        for key, value in values.items():
            setattr(*where[key], value)
        try:
            yield
        finally:
            for key, value in old.items():
                setattr(*where[key], value)

    def baseline(self, root: Path) -> int:
        """The walk before CRCs: sha256 in 1 MiB reads (the change check around it is scan_root's)."""
        agent = self.agent

        def sha256_only(f, size, **kwargs):
            return agent.FileChecksums(agent.sha256_file(f), {}, None, round(time.time(), 3))

        with self.patched(
            {"cache.checksum_file": sha256_only, "cache.zip_members": lambda f, size: None, "walk.PIPELINE_FILES": 0}
        ):
            return self.walk("baseline", root)

    def new(self, root: Path) -> int:
        """scan_root --checksums as it is."""
        return self.walk("new", root)

    def sequential(self, root: Path) -> int:
        """The same with the pipeline off: small files' CRCs on the walking thread."""
        with self.patched({"walk.PIPELINE_FILES": 0}):
            return self.walk("sequential", root)

    def one_thread(self, root: Path) -> int:
        """Everything on the walking thread."""
        with self.patched({"walk.PIPELINE_FILES": 0, "checksums.CHECKSUM_INLINE_BYTES": 1 << 62}):
            return self.walk("one_thread", root)

    def check(self) -> None:
        """The new pass sent what the sequential one did (but when each file was read)."""

        def without_time(lines: list[dict]) -> list[dict]:
            return [{k: v for k, v in line.items() if k != "checksummed_at"} for line in lines]

        for root, lines in self.lines["sequential"].items():
            if without_time(self.lines["new"][root]) != without_time(lines):
                raise SystemExit(f"the new pass's lines differ from the sequential pass's below {root}")


def timed(run, root: Path) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run(root)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-awscrt", action="store_true", help="import the agent as if awscrt were missing")
    parser.add_argument("--keep", metavar="DIR")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    if args.no_awscrt:
        sys.modules["awscrt"] = None  # type: ignore[assignment]  # import awscrt now raises ImportError
        sys.modules["awscrt.checksums"] = None  # type: ignore[assignment]
    from fleet import agent  # after the switch above

    total = int(args.gib * 1024 * MIB)
    where = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ckptfleet-agent-bench-"))
    names = ("baseline", "new", "sequential", "one_thread")
    walks = Walks(agent)
    try:
        say(f"writing {total / MIB:,.0f} MiB of files in {where}")
        files = build(where, total)
        size = sum(p.stat().st_size for p in files)
        large_root, small_root = where / "large", where / "small"
        large = [p for p in files if p.parent == large_root]
        small = [p for p in files if p.parent == small_root]
        if any(p.stat().st_size < agent.checksums.CHECKSUM_INLINE_BYTES for p in large) or any(
            p.stat().st_size >= agent.checksums.CHECKSUM_INLINE_BYTES for p in small
        ):
            raise SystemExit(
                f"large/ and small/ must be split at CHECKSUM_INLINE_BYTES ({agent.checksums.CHECKSUM_INLINE_BYTES})"
            )
        say(f"{len(files):,} files, {size / MIB:,.0f} MiB; warming the page cache")
        warm(files)
        load_before = os.getloadavg()
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        parts: dict[str, list[tuple[float, float]]] = {f"{n}_{k}": [] for n in names for k in ("large", "small")}
        for r in range(args.rounds):
            for name in names:
                run = getattr(walks, name)
                (wl, cl), (ws, cs) = timed(run, large_root), timed(run, small_root)
                wall, cpu = wl + ws, cl + cs
                rows[name].append((wall, cpu))
                parts[f"{name}_large"].append((wl, cl))
                parts[f"{name}_small"].append((ws, cs))
                say(f"round {r + 1} {name:10s} wall {wall:6.2f} s  cpu {cpu:6.2f} s  {size / MIB / wall:6.0f} MiB/s")
            if r == 0:
                walks.check()
        load_after = os.getloadavg()
    finally:
        if not args.keep:
            shutil.rmtree(where, ignore_errors=True)

    def med(name: str, i: int) -> float:
        return statistics.median(row[i] for row in (rows.get(name) or parts[name]))

    def ratio(name: str, base: str = "baseline") -> float:
        return round(med(name, 0) / med(base, 0), 3)

    figures = {
        "files": len(files),
        "mib": round(size / MIB),
        "algorithms": ["sha256", *agent.CRC_ALGORITHMS],
        "rounds": args.rounds,
        **{f"{name}_wall_s": [round(w, 3) for w, _ in rows[name]] for name in names},
        **{f"{name}_cpu_s": [round(c, 3) for _, c in rows[name]] for name in names},
        **{
            f"{name}_{k}_wall_s": [round(w, 3) for w, _ in parts[f"{name}_{k}"]]
            for name in names
            for k in ("large", "small")
        },
        "one_thread_wall_ratio": ratio("one_thread"),
        "sequential_wall_ratio": ratio("sequential"),
        "large_files": len(large),
        "large_wall_ratio": ratio("new_large", "baseline_large"),
        "small_files": len(small),
        "small_wall_ratio": ratio("new_small", "baseline_small"),
        "sequential_small_wall_ratio": ratio("sequential_small", "baseline_small"),
        "wall_ratio": ratio("new"),
        "cpu_ratio": round(med("new", 1) / med("baseline", 1), 3),
        "best_wall_ratio": round(min(w for w, _ in rows["new"]) / min(w for w, _ in rows["baseline"]), 3),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
        "cpus": os.cpu_count(),
    }
    load = f"{[round(x, 2) for x in load_before]} -> {[round(x, 2) for x in load_after]}"
    print(f"agent checksum walk over {figures['files']:,} files, {figures['mib']:,} MiB, warm page cache")
    print(f"  algorithms: {', '.join(figures['algorithms'])}; {os.cpu_count()} CPUs; load {load}")
    for name, label in (
        ("baseline", "baseline (sha256 only):"),
        ("new", "new (sha256 + CRCs):"),
        ("sequential", "without the pipeline:"),
        ("one_thread", "all on one thread:"),
    ):
        print(
            f"  {label:25s} wall median {med(name, 0):6.2f} s  cpu median {med(name, 1):6.2f} s"
            f"  ({size / MIB / med(name, 0):,.0f} MiB/s)" + ("" if name == "baseline" else f"  wall {ratio(name):.2f}x")
        )
    print(
        f"  ratio new/baseline:       wall {figures['wall_ratio']:.2f}x"
        f" (best of each {figures['best_wall_ratio']:.2f}x)  cpu {figures['cpu_ratio']:.2f}x   target: wall <= 1.15x"
    )
    print(
        f"  by file size: {len(large)} large files: wall {figures['large_wall_ratio']:.2f}x"
        f" ({med('baseline_large', 0):.2f} -> {med('new_large', 0):.2f} s);"
        f" {len(small):,} below {agent.checksums.CHECKSUM_INLINE_BYTES // 1024} KiB:"
        f" {figures['small_wall_ratio']:.2f}x ({med('baseline_small', 0):.2f} -> {med('new_small', 0):.2f} s;"
        f" without the pipeline {figures['sequential_small_wall_ratio']:.2f}x, {med('sequential_small', 0):.2f} s)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
