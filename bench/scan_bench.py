#!/usr/bin/env python3
"""Bucket-scan benchmark: scan a 200,000-object bucket on a local S3 endpoint, next to ``aws s3api list-objects-v2``.

The endpoint is moto's server in its own process, filled with DCP-like checkpoints
(``{team}/{run}/step-N/__R_0.distcp`` plus a ``.metadata`` that really is a pickled DCP ``Metadata``
naming every rank's file). The scan is the production path: a fresh PostgreSQL database
(``--db-name``, default ``ckptfleet_scanbench``) migrated with ``manage.py migrate``,
``ingest.scan.bucket_add``, a real ``celery worker`` process on Redis (``--redis-db``, default 12),
and ``ingest.scan.scan_start`` queueing the task; the clock runs from ``scan_start`` until the
inventory is applied, and for a bucket that fetches checksums on until the HEADs that follow the
snapshot in the same task are written. Measured in the same run against the same
endpoint: ``aws s3api list-objects-v2 --bucket B --endpoint-url URL > /dev/null`` (the awscli
package, installed by this script into a virtualenv of its own the first time), and ``fleet.s3``
listing the bucket without ingesting anything.

    .venv/bin/python bench/scan_bench.py                     # 200,000 objects (+ a 20,000-object probe)
    .venv/bin/python bench/scan_bench.py --objects 50000     # quick
    make bench-scan BENCH_ARGS="--objects 50000"

Two things about the endpoint, said plainly because they shape the figures:

- **Filling.** 200,000 PUTs over HTTP take minutes on moto, so the endpoint process fills itself
  through moto's own backend (``S3Backend.put_object``, the call its HTTP handler makes), with a
  SHA256 checksum per object as ``put_object(ChecksumAlgorithm="SHA256")`` would store. Everything
  measured afterwards goes over HTTP.
- **Listing.** moto 5.2 answers each ListObjectsV2 page by collecting and sorting *every* key of
  the bucket, so listing N keys costs O(N^2 log N): ~4 s per page at 200,000 keys, ~15 minutes per
  listing, for the CLI and the scanner alike. S3 serves a page in roughly constant time. The
  endpoint therefore replaces ``S3Backend.list_objects_v2`` with one that bisects a sorted index
  of the key names (same answers: prefix, delimiter, continuation token, start-after, max-keys).
  ``--stock-moto`` turns that off.

Options: ``--objects N`` (big bucket), ``--probe-objects N`` (a smaller bucket scanned first, for
the worker's peak RSS at two sizes; 0 skips it), ``--ranks N`` (ranks per checkpoint),
``--no-copy`` (skip the second big bucket scanned without HEAD requests), ``--no-head`` (register the
big bucket without HEAD requests too: the listing path only, quickly), ``--keep``, ``--json FILE``,
``--py-spy FILE`` / ``--py-spy-rescan FILE`` (profile the worker during the first big scan / the re-scan;
``py-spy`` from ``PATH``, else ``.venv/bin``),
``--analyze`` (ANALYZE catalog_shardfile before the re-scan), ``--debug`` (CKPTFLEET_DEBUG=1 in the
worker), ``--stock-moto``.
This is a benchmark, not a test: it stops only when a scan fails. Figures and how to read them:
docs/benchmarks.md ("Bucket scans").
"""

from __future__ import annotations

import argparse
import base64
import bisect
import dataclasses
import hashlib
import json
import os
import pickle
import random
import re
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

DB_NAME = "ckptfleet_scanbench"  # --db-name; PG_BENCH and REDIS_URL follow the options in main()
PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"
PG_BENCH = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
REDIS_URL = "redis://127.0.0.1:6379/12"
REGION = "us-east-1"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "scanbench",
    "AWS_SECRET_ACCESS_KEY": "scanbench-secret",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}
AWS_UNSET = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
TEAMS = {
    "llm": ["llama-7b", "llama-70b", "mixtral-8x7b", "code-13b"],
    "multimodal": ["vlm-34b", "clip-g"],
    "speech": ["asr-2b", "tts-1b"],
    "vision": ["vit-22b", "dino-g"],
    "rl": ["policy-8b", "reward-8b"],
}
STEPS_PER_RUN = 20
AWSCLI_VERSION = "1.45.11"  # the baseline, installed by this script into its own virtualenv (--aws-cli to override)
AWSCLI_HOME = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ckptfleet-bench" / f"awscli-{AWSCLI_VERSION}"
)
STORED_LOG = re.compile(
    r"scan (?P<id>\d+) stored: (?P<heads>\d+) HEAD requests after the snapshot, (?P<written>\d+) files updated, "
    r"(?P<reverified>\d+) copies re-verified, in (?P<stored_s>[\d.]+) s"
)
SCAN_LOG = re.compile(
    r"scan (?P<id>\d+) of .*?: (?P<staged>\d+) objects staged, (?P<heads>\d+) HEAD and (?P<gets>\d+) ranged GET"
)
APPLIED_LOG = re.compile(
    r"inventory (?P<id>\d+) applied(?: \((?P<mode>\w+)\))?: staged (?P<staged>\d+) rows in (?P<stage_s>[\d.]+) s, "
    r"merged \(\+(?P<added>\d+) ~(?P<changed>\d+) -(?P<gone>\d+)\) in (?P<merge_s>[\d.]+) s, "
    r"judged (?P<judged>\d+) checkpoint copies in (?P<judge_s>[\d.]+) s, committed in (?P<commit_s>[\d.]+) s"
)


def say(message: str) -> None:
    print(f"[scan-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the layout -----------------------------------------------------------------------------------


def dcp_metadata(sizes: dict[str, int]) -> bytes:
    """A pickled ``torch.distributed.checkpoint.metadata.Metadata`` whose storage_data names each file.

    Pickled from look-alike classes registered under torch's module names for the moment of
    ``pickle.dumps``, so the bytes are what torch writes for these fields (the agent's restricted
    unpickler reads them with stubs) without installing torch.
    """
    names = [
        "torch",
        "torch.distributed",
        "torch.distributed.checkpoint",
        "torch.distributed.checkpoint.metadata",
        "torch.distributed.checkpoint.filesystem",
    ]
    saved = {name: sys.modules.get(name) for name in names}
    modules = {name: types.ModuleType(name) for name in names}

    @dataclasses.dataclass
    class Metadata:
        state_dict_metadata: dict
        planner_data: Any = None
        storage_data: Any = None

    @dataclasses.dataclass(frozen=True)
    class MetadataIndex:
        fqn: str
        offset: tuple | None = None
        index: int | None = None

    @dataclasses.dataclass
    class _StorageInfo:
        relative_path: str
        offset: int
        length: int

    for cls, module in (
        (Metadata, "torch.distributed.checkpoint.metadata"),
        (MetadataIndex, "torch.distributed.checkpoint.metadata"),
        (_StorageInfo, "torch.distributed.checkpoint.filesystem"),
    ):
        cls.__module__ = module
        cls.__qualname__ = cls.__name__
        setattr(modules[module], cls.__name__, cls)
    try:
        sys.modules.update(modules)
        storage = {
            MetadataIndex(f"model.layers.{i}.weight", (i, 0), 0): _StorageInfo(name, 0, size)
            for i, (name, size) in enumerate(sorted(sizes.items()))
        }
        return pickle.dumps(Metadata(state_dict_metadata={}, storage_data=storage))
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def layout(objects: int, ranks: int, seed: int, tag: str = "pretrain") -> tuple[list[tuple[str, int, str, str]], dict]:
    """(key, size, storage class, kind) of every object, in write order (a checkpoint's .metadata last),
    and what a correct scan must find. ~20 checkpoints per run; the oldest 20% of a run's steps are in
    DEEP_ARCHIVE, the next 20% in STANDARD_IA. One checkpoint in a hundred lists a rank whose file is
    missing: partial, unless its .metadata is in DEEP_ARCHIVE, which the scanner does not read (it
    would need a restore), so that copy is judged from its file names: complete. ``tag`` names the
    runs, so buckets of other tags hold other runs."""
    per = ranks + 1
    checkpoints = -(-objects // per)
    rng = random.Random(seed)
    missing = set(rng.sample(range(checkpoints), k=max(1, checkpoints // 100)))
    team_names = sorted(TEAMS)
    out: list[tuple[str, int, str, str]] = []
    expected = {"checkpoints": checkpoints, "partial": 0, "archived_checkpoints": 0}
    left = objects
    for c in range(checkpoints):
        run_no, step_no = divmod(c, STEPS_PER_RUN)
        team = team_names[run_no % len(team_names)]
        models = TEAMS[team]
        run = f"{models[(run_no // len(team_names)) % len(models)]}-{tag}-{run_no:03d}"
        step = (step_no + 1) * 500
        files = min(per, left)
        left -= files
        rank_files = max(1, files - 1)
        share = step_no / STEPS_PER_RUN
        storage_class = "DEEP_ARCHIVE" if share < 0.2 else "STANDARD_IA" if share < 0.4 else "STANDARD"
        sizes = {f"__{r}_0.distcp": 1024 + rng.randrange(1024) for r in range(rank_files)}
        listed = dict(sizes)
        if c in missing and rank_files > 1:
            listed[f"__{rank_files}_0.distcp"] = 1024  # named by the manifest, never written
            expected["partial"] += storage_class != "DEEP_ARCHIVE"
        if storage_class == "DEEP_ARCHIVE":
            expected["archived_checkpoints"] += 1
        base = f"{team}/{run}/step-{step}"
        for name, size in sizes.items():
            out.append((f"{base}/{name}", size, storage_class, "shard"))
        if files > 1:
            out.append((f"{base}/.metadata", 0, storage_class, json.dumps(listed)))
    return out, expected


# --- the endpoint process ---------------------------------------------------------------------------


def install_indexed_listing() -> None:
    """Replace moto's ListObjectsV2 (sorts every key of the bucket for every page) by a bisect over a
    sorted index of the key names, rebuilt when the number of keys changes (the bench never replaces
    one key by another). Same answers and the same continuation tokens as moto's own."""
    from moto.s3 import models

    index: dict[int, tuple[int, list[str]]] = {}

    def names_of(bucket: Any) -> list[str]:
        hit = index.get(id(bucket))
        if hit is None or hit[0] != len(bucket.keys):
            hit = (len(bucket.keys), sorted(dict.keys(bucket.keys)))
            index[id(bucket)] = hit
        return hit[1]

    def list_objects_v2(self, bucket, prefix, delimiter, continuation_token, start_after, max_keys):
        if isinstance(bucket, models.FakeTableStorageBucket):
            raise models.MethodNotAllowed()
        if max_keys == 0:
            return [], False, None
        names = names_of(bucket)
        prefix = prefix or ""
        limit = self._pagination_tokens.get(continuation_token) if continuation_token else start_after
        i = bisect.bisect_left(names, prefix)
        if limit:
            i = max(i, bisect.bisect_right(names, limit))
        out: list[Any] = []
        truncated = False
        while i < len(names):
            name = names[i]
            if not name.startswith(prefix):
                break
            if delimiter:
                cut = name.find(delimiter, len(prefix))
                if cut >= 0:
                    folder = name[: cut + len(delimiter)]
                    after = bisect.bisect_left(names, folder[:-1] + chr(ord(folder[-1]) + 1), i)
                    if not limit or folder > limit:
                        if len(out) == max_keys:
                            truncated = True
                            break
                        out.append(folder)
                    i = after
                    continue
            key = bucket.keys[name]
            i += 1
            if isinstance(key, models.FakeDeleteMarker):
                continue
            if len(out) == max_keys:
                truncated = True
                break
            out.append(key)
        token = None
        if truncated:
            last = out[-1]
            last_name = last.name if isinstance(last, models.FakeKey) else last
            token = hashlib.md5(last_name.encode(), usedforsecurity=False).hexdigest()
            self._pagination_tokens[token] = last_name
        return out, truncated, token

    models.S3Backend.list_objects_v2 = list_objects_v2


def serve_moto(port: int, buckets: list[dict], stock: bool) -> None:
    """The endpoint process: moto's server on 127.0.0.1:port, buckets filled through moto's backend."""
    for name, value in AWS_ENV.items():
        os.environ[name] = value
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends
    from moto.server import ThreadedMotoServer

    if not stock:
        install_indexed_listing()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    filled = []
    for spec in buckets:
        t0 = time.perf_counter()
        backend.create_bucket(spec["name"], REGION)
        objects, _ = layout(spec["objects"], spec["ranks"], spec["seed"], spec["tag"])
        noise = random.Random(spec["seed"]).randbytes(4096)
        count = 0
        for key, size, storage_class, kind in objects:
            body = dcp_metadata(json.loads(kind)) if kind != "shard" else (key.encode() + noise)[:size]
            fake = backend.put_object(
                spec["name"],
                key,
                body,
                storage=storage_class,
                checksum_value=base64.b64encode(hashlib.sha256(body).digest()).decode(),
            )
            fake.checksum_algorithm = "SHA256"
            count += 1
        filled.append({"bucket": spec["name"], "objects": count, "seconds": time.perf_counter() - t0})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"ready": True, "filled": filled, "maxrss_kib": peak, "indexed": not stock}), flush=True)
    signal.signal(signal.SIGTERM, lambda *a: (server.stop(), sys.exit(0)))
    while True:
        time.sleep(3600)


# --- processes ------------------------------------------------------------------------------------


def venv_python() -> str:
    candidate = REPO / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0])
    return out


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_manage(env: dict, *args: str) -> str:
    done = subprocess.run(
        [venv_python(), "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"scan-bench: manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


class Endpoint:
    """moto's server in its own process, filled before it answers."""

    def __init__(self, buckets: list[dict], logdir: Path, *, stock: bool) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = logdir / "moto.log"
        args = [venv_python(), __file__, "serve-moto", "--port", str(self.port), "--buckets", json.dumps(buckets)]
        if stock:
            args.append("--stock-moto")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self.log.open("wb"), text=True, start_new_session=True
        )
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"scan-bench: the endpoint exited: {self.log.read_text(errors='replace')[-3000:]}")
        self.ready = json.loads(line)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class Worker:
    """A solo Celery worker on the bench database and the bench's Redis db."""

    def __init__(self, env: dict, logdir: Path) -> None:
        self.log = logdir / "worker.log"
        self.proc = subprocess.Popen(
            [
                venv_python(),
                "-m",
                "celery",
                "-A",
                "ckptfleet",
                "worker",
                "-P",
                "solo",
                "-l",
                "info",
                "-n",
                "scanbench@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=REPO,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        while " ready." not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None:
                raise SystemExit(f"scan-bench: the worker exited: {self.log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"scan-bench: the worker did not come up in 90 s; see {self.log}")
            time.sleep(0.2)

    def memory(self) -> dict[str, int]:
        return proc_status(self.proc.pid)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def logged(self, pattern: re.Pattern, inventory_id: int, timeout: float = 30) -> dict | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in pattern.finditer(self.log.read_text(errors="replace")):
                if int(m["id"]) == inventory_id:
                    return {
                        k: (float(v) if k.endswith("_s") else int(v) if v and v.isdigit() else v)
                        for k, v in m.groupdict().items()
                    }
            time.sleep(0.1)
        return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # a cold stop: do not finish a task
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class BackendCpu:
    """CPU seconds of the PostgreSQL backends of the bench database while it runs (sampled every 50 ms)."""

    def __init__(self) -> None:
        import threading

        self.seen: dict[int, float] = {}
        self.start: dict[int, float] = {}
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, conn) -> None:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (DB_NAME,)
        ).fetchall()
        for (pid,) in rows:
            try:
                self.seen[pid] = cpu_seconds(pid)
            except OSError:
                pass

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(PG_BENCH, autocommit=True) as conn:
            self._sample(conn)
            self.start = dict(self.seen)
            while not self.stop_event.wait(0.05):
                self._sample(conn)
            self._sample(conn)

    def __enter__(self) -> BackendCpu:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join()

    @property
    def seconds(self) -> float:
        return sum(v - self.start.get(pid, 0.0) for pid, v in self.seen.items())


def recreate_database() -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")


def drop_database() -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


def pg_checkpoint() -> None:
    import psycopg

    with psycopg.connect(PG_BENCH, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


# --- measurements ---------------------------------------------------------------------------------


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ensure_aws_cli() -> tuple[str, str]:
    """The ``aws`` of awscli ``AWSCLI_VERSION`` in a virtualenv of its own (made once, then reused), and its version.

    Its own virtualenv because awscli pins botocore exactly, and the scanner's botocore is another
    version: installed side by side, one of them would be replaced.
    """
    aws = AWSCLI_HOME / "bin" / "aws"
    if not aws.exists():
        say(f"installing awscli {AWSCLI_VERSION} into {AWSCLI_HOME} (once)")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(AWSCLI_HOME)], check=True)
        subprocess.run(
            [str(AWSCLI_HOME / "bin" / "python"), "-m", "pip", "install", "-q", f"awscli=={AWSCLI_VERSION}"],
            check=True,
        )
    done = subprocess.run([str(aws), "--version"], capture_output=True, text=True, check=True)
    return str(aws), (done.stdout or done.stderr).strip()


def aws_cli(endpoint: Endpoint, bucket: str, env: dict, aws: str = "aws") -> dict:
    """``aws s3api list-objects-v2 --bucket B --endpoint-url URL > /dev/null``, timed with its CPU."""
    command = f"{aws} s3api list-objects-v2 --bucket {bucket} --endpoint-url {endpoint.url} > /dev/null"
    say(f"baseline: {command}")
    cpu0, moto0, load = children_cpu(), endpoint.cpu(), os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"scan-bench: the aws CLI failed: {done.stderr[-2000:]}")
    result = {
        "s": seconds,
        "cpu_s": children_cpu() - cpu0,
        "moto_cpu_s": endpoint.cpu() - moto0,
        "load_1min": load,
        "command": command,
    }
    say(f"aws CLI: {seconds:.2f} s (CLI CPU {result['cpu_s']:.1f} s, endpoint CPU {result['moto_cpu_s']:.1f} s)")
    return result


def listing_only(endpoint: Endpoint, bucket: str, *, parallel: bool) -> dict:
    """fleet.s3 listing the whole bucket, pages thrown away: sequential, or split by top-level prefix
    across the scanner's own number of threads, as ``ingest.scan`` does for a big bucket."""
    from concurrent.futures import ThreadPoolExecutor

    from fleet import s3
    from ingest.scan import LISTING_THREADS

    client = s3.make_client(endpoint_url=endpoint.url, region_name=REGION, addressing_style="path")
    cpu0, moto0, load = time.process_time(), endpoint.cpu(), os.getloadavg()[0]
    t0 = time.perf_counter()
    count = 0
    pages = 0
    if parallel:
        prefixes = [p for page in s3.list_pages(client, bucket, "", delimiter="/") for p in page.prefixes]

        def one(prefix: str) -> tuple[int, int]:
            n = p = 0
            for page in s3.list_pages(client, bucket, prefix):
                n += len(page.objects)
                p += 1
            return n, p

        with ThreadPoolExecutor(max_workers=LISTING_THREADS) as pool:
            for n, p in pool.map(one, prefixes):
                count += n
                pages += p
    else:
        for page in s3.list_pages(client, bucket, ""):
            count += len(page.objects)
            pages += 1
    seconds = time.perf_counter() - t0
    result = {
        "s": seconds,
        "objects": count,
        "pages": pages,
        "cpu_s": time.process_time() - cpu0,
        "moto_cpu_s": endpoint.cpu() - moto0,
        "load_1min": load,
    }
    say(f"fleet.s3 listing ({'parallel by prefix' if parallel else 'sequential'}): {result}")
    return result


def scan(
    endpoint: Endpoint, worker: Worker, location, *, label: str, expected_objects: int, profile: Path | None = None
) -> dict:
    """scan_start, then poll the inventory every 0.1 s until it is applied or failed."""
    from audit.actor import Actor
    from catalog.models import CheckpointCopy
    from fleet.models import Bucket
    from ingest.scan import scan_start

    pg_checkpoint()
    spy = None
    if profile is not None:
        spy = subprocess.Popen(
            [
                shutil.which("py-spy") or str(Path(venv_python()).parent / "py-spy"),
                "record",
                "-p",
                str(worker.proc.pid),
                "-r",
                "50",
                "--format",
                "raw",
                "--threads",
                "--idle",
                "--nonblocking",
                "-o",
                str(profile),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(1)
    say(f"{label}: scan_start of {location.name}")
    load = os.getloadavg()[0]
    worker0, moto0 = worker.cpu(), endpoint.cpu()
    # The worker's RSS while it lists and stages (objects counted so far below the bucket's total),
    # and while it applies (merge, recognition, verification): where memory grows, if it does.
    rss = {"staging": 0, "applying": 0}
    staged_at = None
    with BackendCpu() as backends:
        t0 = time.perf_counter()
        inventory = scan_start(location=location, actor=Actor.command(label="bench/scan_bench.py"))
        while True:
            inventory.refresh_from_db()
            if inventory.status in ("applied", "failed"):
                break
            now_rss = worker.memory()["VmRSS"]
            if inventory.files_count >= expected_objects:
                staged_at = staged_at or time.perf_counter() - t0
                rss["applying"] = max(rss["applying"], now_rss)
            else:
                rss["staging"] = max(rss["staging"], now_rss)
            time.sleep(0.1)
        e2e = time.perf_counter() - t0
        applied_cpu = (worker.cpu() - worker0, endpoint.cpu() - moto0)
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=120)
    if inventory.status != "applied":
        raise SystemExit(f"scan-bench: scan {inventory.pk} failed: {inventory.error}")
    requests = worker.logged(SCAN_LOG, inventory.pk) or {}
    phases = worker.logged(APPLIED_LOG, inventory.pk) or {}
    # The HEADs of new objects run after the snapshot is applied, in the same task: wait for them
    # (so the next scan does not queue behind them) and time them from the scan's start.
    stored: dict = {}
    if Bucket.objects.get(location=location).fetch_checksums:
        with BackendCpu() as stored_backends:
            stored = worker.logged(STORED_LOG, inventory.pk, timeout=7200) or {}
            stored_e2e = time.perf_counter() - t0
        if stored:
            stored["e2e_s"] = stored_e2e
            stored["pg_cpu_s"] = stored_backends.seconds
            stored["worker_cpu_s"] = worker.cpu() - worker0 - applied_cpu[0]
            stored["moto_cpu_s"] = endpoint.cpu() - moto0 - applied_cpu[1]
    states: dict[str, int] = {}
    for state in CheckpointCopy.objects.filter(location=location, gone_at__isnull=True).values_list("state", flat=True):
        states[state] = states.get(state, 0) + 1
    result = {
        "id": inventory.pk,
        "e2e_s": e2e,
        "task_s": inventory.duration_seconds,
        "queue_s": (inventory.started_at - inventory.received_at).total_seconds(),
        "objects": inventory.files_count,
        "added": inventory.files_added,
        "changed": inventory.files_changed,
        "gone": inventory.files_gone,
        "checkpoints_found": inventory.checkpoints_found,
        "notes": inventory.error,
        "requests": requests,
        "phases": phases,
        "stored": stored,
        "states": states,
        "worker_cpu_s": applied_cpu[0],
        "moto_cpu_s": applied_cpu[1],
        "pg_cpu_s": backends.seconds,
        "load_1min": load,
        "worker": worker.memory(),
        "rss_kib": rss,
        "staged_after_s": staged_at,
    }
    say(
        f"{label}: scan {inventory.pk} applied in {e2e:.2f} s: {inventory.files_count:,} objects "
        f"+{inventory.files_added} ~{inventory.files_changed} -{inventory.files_gone}; {requests}; {phases}; "
        f"CPU worker {result['worker_cpu_s']:.1f} s, endpoint {result['moto_cpu_s']:.1f} s, "
        f"PostgreSQL {result['pg_cpu_s']:.1f} s; after the snapshot: {stored or 'no HEAD phase'}"
    )
    return result


def page_query(location_ids: list[int]) -> dict:
    """The fleet page's bytes-by-tier query over every present object of the bench's buckets."""
    from dashboard.selectors_fleet import bytes_by_tier

    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        found = bytes_by_tier(location_ids)
        times.append(time.perf_counter() - t0)
    return {"s": min(times), "tiers": sum(len(v) for v in found.values())}


def source_state() -> dict:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout if done.returncode == 0 else ""

    dirty = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD").strip() or "unknown", "modified": dirty}


# --- report ---------------------------------------------------------------------------------------


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


def report(r: dict) -> str:
    lines = ["| measure | value | note |", "|---|---|---|"]

    def row(label: str, value: str, note: str = "") -> None:
        lines.append(f"| {label} | {value} | {note} |")

    n = r["objects"]
    best_cli = min(c["s"] for c in r["cli_runs"])
    endpoint = r["endpoint"]
    source = r["source"]
    row("source", f"commit {source['commit']}", f"modified tracked files: {', '.join(source['modified']) or 'none'}")
    row(
        "bucket",
        f"{n:,} objects",
        f"{r['expected']['checkpoints']:,} DCP checkpoints of {r['ranks']} ranks + .metadata; "
        f"{r['expected']['partial']} missing a rank; {r['expected']['archived_checkpoints']:,} in DEEP_ARCHIVE",
    )
    fill = sum(f["seconds"] for f in endpoint["filled"])
    row(
        "endpoint",
        "moto 5.2 server, own process",
        f"filled through moto's backend in {fill:.1f} s ({', '.join(f['bucket'] for f in endpoint['filled'])}); "
        f"listing {'indexed (see the docstring)' if endpoint['indexed'] else 'stock moto'}; "
        f"endpoint RSS after filling {mib(endpoint['maxrss_kib'])}",
    )
    row("baseline CLI", r.get("aws_cli", "?"), "in its own virtualenv, made by this script")
    row("database", r.get("database", "?"), "dropped and made by this script")
    for i, c in enumerate(r["cli_runs"], 1):
        row(
            f"**baseline: `aws s3api list-objects-v2`** (run {i})",
            f"**{c['s']:.2f} s**" if c["s"] == best_cli else f"{c['s']:.2f} s",
            f"CLI CPU {c['cpu_s']:.1f} s, endpoint CPU {c['moto_cpu_s']:.1f} s; load {c['load_1min']:.1f}",
        )
    for key, label in (("list_seq", "sequential"), ("list_par", "split by top-level prefix, 8 threads")):
        lo = r[key]
        row(
            f"fleet.s3 listing only ({label})",
            f"{lo['s']:.2f} s",
            f"{lo['objects']:,} objects in {lo['pages']} pages; client CPU {lo['cpu_s']:.1f} s, "
            f"endpoint CPU {lo['moto_cpu_s']:.1f} s; {lo['s'] / best_cli:.2f}x the CLI",
        )

    def scan_rows(key: str, title: str) -> None:
        s = r.get(key)
        if not s:
            return
        p, q = s["phases"], s["requests"]
        row(
            f"**{title}**",
            f"**{s['e2e_s']:.2f} s**",
            f"**{s['e2e_s'] / best_cli:.2f}x the CLI** (target 1.25x); +{s['added']:,} ~{s['changed']:,} "
            f"-{s['gone']:,}; CPU worker {s['worker_cpu_s']:.1f} s + endpoint {s['moto_cpu_s']:.1f} s + "
            f"PostgreSQL {s['pg_cpu_s']:.1f} s; load {s['load_1min']:.1f}",
        )
        row(
            "&nbsp;&nbsp;list + HEAD/GET + stage",
            f"{p.get('stage_s', float('nan')):.2f} s",
            f"{q.get('heads', '?'):,} HEAD, {q.get('gets', '?'):,} ranged GET requests"
            if q
            else "request counts not logged",
        )
        row("&nbsp;&nbsp;merge", f"{p.get('merge_s', float('nan')):.2f} s", "")
        row(
            "&nbsp;&nbsp;judge (recognise, verify, usage)",
            f"{p.get('judge_s', float('nan')):.2f} s",
            f"{p.get('judged', '?')} checkpoint copies",
        )
        row("&nbsp;&nbsp;commit", f"{p.get('commit_s', float('nan')):.2f} s", f"queue {s['queue_s']:.2f} s")
        st = s.get("stored") or {}
        if st:
            row(
                "&nbsp;&nbsp;then: stored checksums (HEAD), written and re-verified",
                f"done {st['e2e_s']:.2f} s after the start",
                f"{st['heads']:,} HEAD, {st['written']:,} files updated, {st['reverified']:,} copies re-verified in "
                f"{st['stored_s']:.2f} s ({st['e2e_s'] / best_cli:.2f}x the CLI in all); CPU worker "
                f"{st['worker_cpu_s']:.1f} s + endpoint {st['moto_cpu_s']:.1f} s + PostgreSQL {st['pg_cpu_s']:.1f} s",
            )
        row(
            "&nbsp;&nbsp;worker RSS: listing + staging / applying",
            f"{mib(s['rss_kib']['staging'])} / {mib(s['rss_kib']['applying'])}",
            "peaks of VmRSS sampled every 0.1 s",
        )
        states = s["states"]
        row(
            "&nbsp;&nbsp;copies complete / partial / other",
            f"{states.get('complete', 0):,} / {states.get('partial', 0):,} / "
            f"{sum(v for k, v in states.items() if k not in ('complete', 'partial')):,}",
            f"expected {s['expect_complete']:,} / {s['expect_partial']:,} / 0",
        )

    if r.get("probe"):
        scan_rows("probe", f"scan of the probe bucket ({r['probe_objects']:,} objects, first, HEAD each)")
    if r.get("no_head"):
        scan_rows("first", f"first scan ({n:,} objects, registered `--no-checksums`: no HEAD)")
    else:
        scan_rows("first", f"first scan ({n:,} objects, default settings: HEAD each new object after the snapshot)")
    if "analyze_s" in r:
        row("`ANALYZE catalog_shardfile` before the re-scan", f"{r['analyze_s']:.2f} s", "--analyze")
    scan_rows("rescan", "re-scan, nothing changed (no HEAD, no GET)")
    scan_rows("nohead", f"first scan of an identical bucket registered `--no-checksums` ({n:,} objects)")
    mem = r["memory"]
    row("worker peak RSS (VmHWM), idle", mib(mem["idle"]), "solo pool: the scan runs in this process")
    if "probe" in mem:
        row(f"worker VmHWM after {r['probe_objects']:,} objects", mib(mem["probe"]), "a fresh worker, first scan")
    row(f"worker VmHWM after {n:,} objects", mib(mem["first"]), "")
    if "nohead" in mem:
        row("worker VmHWM at the end", mib(mem["nohead"]), "")
    pq = r["page_query"]
    row(
        "fleet page: bytes by tier, from the usage rollup",
        f"{pq['s'] * 1000:.0f} ms",
        f"over {r['shardfile_rows']:,} present objects of the bench buckets",
    )
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    global DB_NAME, PG_BENCH, REDIS_URL
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=200_000)
    parser.add_argument("--probe-objects", type=int, default=20_000, help="0: no probe bucket")
    parser.add_argument("--ranks", type=int, default=64, help="ranks (shard files) per checkpoint")
    parser.add_argument("--no-copy", action="store_true", help="skip the second big bucket (no HEAD requests)")
    parser.add_argument(
        "--no-head",
        action="store_true",
        help="register the big bucket --no-checksums too (a quick run of the listing path; implies --no-copy)",
    )
    parser.add_argument("--stock-moto", action="store_true", help="moto's own O(N) per page listing")
    parser.add_argument(
        "--analyze",
        action="store_true",
        help="ANALYZE catalog_shardfile between the first scan and the re-scan (what autovacuum would do)",
    )
    parser.add_argument("--debug", action="store_true", help="CKPTFLEET_DEBUG=1 in the worker (keeps SQL queries)")
    parser.add_argument("--keep", action="store_true", help="keep the database and the temporary directory")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--py-spy", type=Path, metavar="FILE", help="py-spy the worker during the first big scan")
    parser.add_argument("--py-spy-rescan", type=Path, metavar="FILE", help="py-spy the worker during the re-scan")
    parser.add_argument(
        "--db-name", default=DB_NAME, help=f"the bench's own database, dropped and made (default {DB_NAME})"
    )
    parser.add_argument("--redis-db", type=int, default=12, help="the Redis database number of the bench's worker")
    parser.add_argument(
        "--aws-cli", help=f"an aws executable to use instead of awscli {AWSCLI_VERSION} in {AWSCLI_HOME}"
    )
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", args.db_name):
        raise SystemExit(f"scan-bench: {args.db_name!r} is not a plain database name")
    DB_NAME = args.db_name
    PG_BENCH = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
    REDIS_URL = f"redis://127.0.0.1:6379/{args.redis_db}"
    args.no_copy = args.no_copy or args.no_head
    if args.aws_cli:
        aws = shutil.which(args.aws_cli)
        if aws is None:
            raise SystemExit(f"scan-bench: no aws CLI at {args.aws_cli}")
        aws_version = subprocess.run([aws, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    else:
        aws, aws_version = ensure_aws_cli()
    say(f"baseline CLI: {aws} ({aws_version})")

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    tmp = Path(tempfile.mkdtemp(prefix="ckptfleet-scanbench-"))
    nowhere = tmp / "no-aws-config"
    KEYS = ("DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY_FILE")
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if k not in (*KEYS, "CKPTFLEET_AUDIT_KEY", "CKPTFLEET_AUDIT_KEY_FILE") and k not in AWS_UNSET
        },
        **AWS_ENV,
        "AWS_CONFIG_FILE": str(nowhere),
        "AWS_SHARED_CREDENTIALS_FILE": str(nowhere),
        "DATABASE_URL": PG_BENCH,
        "REDIS_URL": REDIS_URL,
        "CKPTFLEET_DEBUG": "1" if args.debug else "0",
        "CKPTFLEET_VAR_DIR": str(tmp / "var"),
        "MEDIA_ROOT": str(tmp / "media"),
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "PYTHONUNBUFFERED": "1",
        "ALLOWED_HOSTS": "127.0.0.1",
    }
    if not args.debug:
        env["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
        env["CKPTFLEET_AUDIT_KEY"] = secrets.token_urlsafe(50)  # production settings need the audit chain's key too
    (tmp / "var").mkdir()
    (tmp / "media").mkdir()

    buckets = []
    if args.probe_objects:
        probe = {"name": "bench-probe", "objects": args.probe_objects, "ranks": args.ranks, "seed": 2, "tag": "probe"}
        buckets.append(probe)
    # bench-copy is a replica of bench-main: the same runs and bytes, a second copy of each checkpoint.
    buckets.append({"name": "bench-main", "objects": args.objects, "ranks": args.ranks, "seed": 1, "tag": "pretrain"})
    if not args.no_copy:
        buckets.append(
            {"name": "bench-copy", "objects": args.objects, "ranks": args.ranks, "seed": 1, "tag": "pretrain"}
        )
    _, expected = layout(args.objects, args.ranks, 1)
    results: dict = {
        "objects": args.objects,
        "probe_objects": args.probe_objects,
        "ranks": args.ranks,
        "no_head": args.no_head,
        "analyze": args.analyze,
        "expected": expected,
        "source": source_state(),
        "aws_cli": aws_version,
        "database": DB_NAME,
    }
    endpoint = worker = None
    ok = False
    try:
        say(f"endpoint: moto in its own process, filling {', '.join(b['name'] for b in buckets)}")
        endpoint = Endpoint(buckets, tmp, stock=args.stock_moto)
        results["endpoint"] = endpoint.ready
        say(f"endpoint ready at {endpoint.url}: {endpoint.ready}")

        say(f"database {DB_NAME}: drop, create, migrate")
        recreate_database()
        run_manage(env, "migrate", "--noinput", "-v", "0")
        os.environ.update(env)
        for name in AWS_UNSET:
            os.environ.pop(name, None)
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ckptfleet.settings")
        import django

        django.setup()
        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()

        # Baselines before the worker starts, each against the same endpoint.
        results["cli_runs"] = [aws_cli(endpoint, "bench-main", env, aws)]
        results["list_seq"] = listing_only(endpoint, "bench-main", parallel=False)
        results["list_par"] = listing_only(endpoint, "bench-main", parallel=True)

        from audit.actor import Actor
        from ingest.scan import bucket_add

        actor = Actor.command(label="bench/scan_bench.py")

        def register(name: str, **kwargs):
            return bucket_add(
                name=f"s3:{name}",
                bucket_name=name,
                endpoint_url=endpoint.url,
                region_name=REGION,
                addressing_style="path",
                scan_every_minutes=0,
                actor=actor,
                **kwargs,
            ).location

        say(f"starting a solo Celery worker on {REDIS_URL}")
        worker = Worker(env, tmp)
        memory = {"idle": worker.memory()["VmHWM"]}
        if args.probe_objects:
            _, probe_expected = layout(args.probe_objects, args.ranks, 2, "probe")
            results["probe"] = scan(
                endpoint, worker, register("bench-probe"), label="probe", expected_objects=args.probe_objects
            )
            results["probe"]["expect_partial"] = probe_expected["partial"]
            results["probe"]["expect_complete"] = probe_expected["checkpoints"] - probe_expected["partial"]
            memory["probe"] = results["probe"]["worker"]["VmHWM"]
        main_location = register("bench-main", fetch_checksums=not args.no_head)
        results["first"] = scan(
            endpoint, worker, main_location, label="first scan", expected_objects=args.objects, profile=args.py_spy
        )
        memory["first"] = results["first"]["worker"]["VmHWM"]
        if args.analyze:
            import psycopg

            t0 = time.perf_counter()
            with psycopg.connect(PG_BENCH, autocommit=True) as conn:
                conn.execute("ANALYZE catalog_shardfile")
            results["analyze_s"] = time.perf_counter() - t0
            say(f"ANALYZE catalog_shardfile took {results['analyze_s']:.2f} s")
        results["rescan"] = scan(
            endpoint, worker, main_location, label="re-scan", expected_objects=args.objects, profile=args.py_spy_rescan
        )
        ids = [main_location.pk]
        if not args.no_copy:
            copy_location = register("bench-copy", fetch_checksums=False)
            results["nohead"] = scan(
                endpoint, worker, copy_location, label="first scan, no HEAD", expected_objects=args.objects
            )
            memory["nohead"] = results["nohead"]["worker"]["VmHWM"]
            ids.append(copy_location.pk)
        for key in ("first", "rescan", "nohead"):
            if key in results:
                results[key]["expect_partial"] = expected["partial"]
                results[key]["expect_complete"] = expected["checkpoints"] - expected["partial"]
        results["memory"] = memory
        results["cli_runs"].append(aws_cli(endpoint, "bench-main", env, aws))
        results["cli"] = results["cli_runs"][0]
        from catalog.models import ShardFile

        results["shardfile_rows"] = ShardFile.objects.filter(location_id__in=ids, gone_at__isnull=True).count()
        results["page_query"] = page_query(ids)
        ok = True
    finally:
        if worker is not None:
            worker.stop()
        if endpoint is not None:
            endpoint.stop()
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # Django may never have been set up
            pass
        if args.keep:
            say(f"kept database {DB_NAME} and {tmp}")
        else:
            try:
                drop_database()
            except Exception as exc:  # report and go on: the figures matter more
                say(f"could not drop {DB_NAME}: {exc}")
            if ok:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                say(f"failed or interrupted: logs kept in {tmp}")
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve-moto":
        serve = argparse.ArgumentParser()
        serve.add_argument("serve")
        serve.add_argument("--port", type=int, required=True)
        serve.add_argument("--buckets", required=True)
        serve.add_argument("--stock-moto", action="store_true")
        a = serve.parse_args()
        serve_moto(a.port, json.loads(a.buckets), a.stock_moto)
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        say("interrupted; processes stopped")
        sys.exit(130)
