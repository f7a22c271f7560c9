#!/usr/bin/env python3
"""Verification benchmark: ``catalog.verification.judge`` on synthetic copies, one copy alone next to two.

The ingest benchmark's ``--second-copy`` measures what comparing a second copy's files costs an ingest end to
end (bench/ingest_bench.py); this one isolates the pure core it spends that time in, with no database, so a
change to ``judge`` or ``catalog.digests`` can be measured in seconds:

    .venv/bin/python bench/verify_bench.py                       # 100,000 files, sha256 / +crc32 / +blocks
    .venv/bin/python bench/verify_bench.py --kinds crc --profile  # cProfile of two copies, top functions

Every file has what the ingest stores for a line of ``ingest_bench.py`` of that kind: the sha256 as its main
checksum and, for ``crc`` and ``blocks``, the ``digests`` text that ``catalog.digests.from_line`` makes of the
line's ``checksums`` and ``checksummed_at`` (``catalog.digests.dumps``), read back as text as
``checkpoints_verify`` reads it. The two copies hold equal values in separate objects, as two copies read from
the database do. "Alone" is the first copy of a checkpoint (nothing to compare with); "two copies" judges
both, as the ingest of a second copy does; the difference, per copy judged, is what comparison adds.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ckptfleet.settings")
# Only the pure core runs (no request, no query): DEBUG spares the bench a secret key and changes nothing here.
os.environ.setdefault("CKPTFLEET_DEBUG", "1")

import django  # noqa: E402

django.setup()

from bench.ingest_bench import EPOCH, crc_fields  # noqa: E402
from catalog.digests import dumps, from_line  # noqa: E402
from catalog.verification import CopyEvidence, FileFacts, judge  # noqa: E402

KINDS = ("sha256", "crc", "blocks")


def copies_of(checkpoint: int, files: int, kind: str) -> list[CopyEvidence]:
    """Two equal copies (A, B) of one DCP checkpoint of ``files`` shards of 300-4,000 MiB."""
    shard = (300 + checkpoint * 37 % 3700) << 20
    members: list[tuple[str, int, str, str | None, float]] = []
    for rank in range(files):
        rel = f"__{rank}_0.distcp"
        path = f"llm/run-{checkpoint // 20:03d}/step-{checkpoint}/{rel}"
        size = shard + rank * 4096
        mtime = EPOCH + checkpoint * 600 + rank * 0.01
        text = None
        if kind != "sha256":
            line = crc_fields(path, size, mtime, blocks=kind == "blocks")
            text = dumps(from_line(line["checksums"], line["checksummed_at"], size))
        members.append((rel, size, hashlib.sha256(path.encode()).hexdigest(), text, mtime))
    return [
        CopyEvidence(
            id=checkpoint * 2 + i,
            where=where,
            files={rel: FileFacts(size, "sha256", sha, text, mtime) for rel, size, sha, text, mtime in members},
        )
        for i, where in enumerate(("bench-host", "bench-host-b"))
    ]


def measure(kind: str, files: int, per_checkpoint: int, profile: Path | None) -> dict:
    checkpoints = [copies_of(c, per_checkpoint, kind) for c in range(files // per_checkpoint)]
    for a, b in checkpoints[:1]:  # the expected verdicts, or the bench measured something else
        alone, both = judge([a])[a.id].verification, {v.verification for v in judge([a, b]).values()}
        if alone != "unverified" or both != {"verified"}:
            raise SystemExit(f"verify_bench: {kind}: alone {alone}, two copies {both}")
    t0 = time.process_time()
    for a, _ in checkpoints:
        judge([a])
    alone_s = time.process_time() - t0
    profiler = cProfile.Profile() if profile else None
    t0 = time.process_time()
    if profiler:
        profiler.enable()
    for pair in checkpoints:
        judge(pair)
    if profiler:
        profiler.disable()
    both_s = time.process_time() - t0
    if profiler:
        profiler.dump_stats(str(profile))
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(15)
    n = len(checkpoints) * per_checkpoint
    return {"kind": kind, "files": n, "alone_s": alone_s, "both_s": both_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=100_000, help="files per copy (default 100,000)")
    parser.add_argument("--per-checkpoint", type=int, default=1_000, help="files per checkpoint (default 1,000)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--profile", type=Path, metavar="FILE", help="cProfile the two-copy runs (stats to FILE)")
    args = parser.parse_args(argv)
    print("| files per copy | checksums | judge, A alone | judge, A and B | per copy judged, alone -> compared |")
    print("|---|---|---|---|---|")
    for kind in args.kinds:
        r = measure(kind, args.files, args.per_checkpoint, args.profile)
        per_alone = r["alone_s"] / r["files"] * 1e6
        per_both = r["both_s"] / (2 * r["files"]) * 1e6
        print(
            f"| {r['files']:,} | {kind} | {r['alone_s']:.2f} s CPU | {r['both_s']:.2f} s CPU | "
            f"{per_alone:.1f} -> {per_both:.1f} µs per file |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
