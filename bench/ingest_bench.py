#!/usr/bin/env python3
"""Ingest benchmark: push a synthetic million-file inventory through the real path, next to a raw COPY.

The real path is the one production uses: a fresh PostgreSQL database migrated with ``manage.py migrate``,
a host registered with ``manage.py fleet_host add``, gunicorn serving ``ckptfleet.wsgi``, a Celery worker
on Redis, and an upload over HTTP exactly as ``docs/wire-format.md`` describes. The baseline, measured in
the same run on the same database, is a psycopg COPY of the same rows into a table indexed like
``catalog_shardfile``: the floor that any ingestion which writes those rows has to pay.

    .venv/bin/python bench/ingest_bench.py                 # 1,000,000 files, ~1,000 DCP checkpoints
    .venv/bin/python bench/ingest_bench.py --files 100000  # quick
    make bench BENCH_ARGS="--files 100000"

Options: ``--files N``, ``--checkpoints N``, ``--probe-files N`` (copies of the big inventory's first checkpoints,
pushed to two fresh locations before the big one, whose worker peak RSS is compared with the big one's, and
against which the big push verifies those checkpoints; 0 skips it), ``--keep``
(keep the database and the temp directory), ``--json FILE`` (write the figures), ``--checksums`` (send a
sha256 with every file), ``--no-debug`` (CKPTFLEET_DEBUG=0), ``--py-spy FILE`` (profile the worker during
the first push).
This is a benchmark, not a test: it stops only when the path itself fails (an upload refused, an
inventory failed); everything else, including the re-push that must change nothing, is printed for
a person to read. See bench/README.md.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402

from fleet.agent import AGENT, encode_line  # noqa: E402  (the agent's own line encoder; stdlib only)

# The database and Redis db the benchmark owns (it drops and flushes them): set by --database / --redis-url,
# so that two people benchmarking on one machine do not destroy each other's runs.
DB_NAME = "ckptfleet_bench"
PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"
PG_BENCH = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
REDIS_URL = "redis://127.0.0.1:6379/14"
HOST = "bench-host"
SECOND_HOST = "bench-host-b"  # --second-copy: a replica host with the same root, as replicas are laid out
ROOT = "/bench/nvme0"
PROBE_ROOT = "/bench/nvme1"
PROBE_COPY_ROOT = "/bench/nvme2"
EPOCH = 1_763_700_000  # November 2025, seconds
BASELINE_COLS = "location_id, path, size, mtime, checksum, checksum_algo, facts, first_seen_at, changed_at"
APPLIED_LOG = re.compile(
    r"inventory (?P<id>\d+) applied(?: \((?P<mode>\w+)\))?: staged (?P<staged>\d+) rows in (?P<stage_s>[\d.]+) s, "
    r"merged \(\+(?P<added>\d+) ~(?P<changed>\d+) -(?P<gone>\d+)\) in (?P<merge_s>[\d.]+) s, "
    r"judged (?P<judged>\d+) checkpoint copies in (?P<judge_s>[\d.]+) s, committed in (?P<commit_s>[\d.]+) s"
)


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the synthetic inventory ----------------------------------------------------------------------

TEAMS = {
    "llm": ["llama-7b", "llama-70b", "mixtral-8x7b", "code-13b"],
    "multimodal": ["vlm-34b", "clip-g"],
    "speech": ["asr-2b", "tts-1b"],
    "vision": ["vit-22b", "dino-g"],
    "rl": ["policy-8b", "reward-8b"],
}


@dataclass(frozen=True)
class Ckpt:
    team: str
    run: str
    step: int
    ranks: int  # ranks the manifest lists
    missing: int | None  # a rank listed in the manifest whose file is absent
    shard_bytes: int
    t0_ns: int

    @property
    def dir(self) -> str:
        return f"{self.team}/{self.run}/step-{self.step}"


def plan(files: int, checkpoints: int, seed: int) -> list[Ckpt]:
    """~20 checkpoints per run, runs spread over teams; every checkpoint has ``files // checkpoints``
    files (``.metadata`` + one ``__R_0.distcp`` per rank), the remainder spread over the first ones.
    One checkpoint in a hundred (at least one) lists a rank in its manifest whose file is missing,
    so the file count stays exactly ``files``."""
    if checkpoints < 1 or files < 2 * checkpoints:
        raise SystemExit("bench: need --checkpoints >= 1 and at least 2 files per checkpoint")
    rng = random.Random(seed)
    runs = max(1, round(checkpoints / 20))
    per_run = -(-checkpoints // runs)
    base, extra = divmod(files, checkpoints)
    missing = set(rng.sample(range(checkpoints), k=max(1, checkpoints // 100)))
    team_names = sorted(TEAMS)
    run_meta = []
    for r in range(runs):
        team = team_names[r % len(team_names)]
        models = TEAMS[team]
        model = models[(r // len(team_names)) % len(models)]
        run_meta.append((team, f"{model}-pretrain-{r:03d}", rng.randint(300, 4000) * 2**20))
    out = []
    for i in range(checkpoints):
        team, run, shard = run_meta[i // per_run]
        j = i % per_run
        step = (j + 1) * 500
        count = base + (1 if i < extra else 0)  # files of this checkpoint
        ranks = count - 1
        miss = None
        if i in missing and ranks >= 1:
            ranks += 1  # the manifest names one more rank than there are files
            miss = rng.randrange(1, ranks)
        t0_ns = (EPOCH + (i // per_run) * 86_400 + step * 7) * 10**9 + rng.randrange(10**9)
        out.append(Ckpt(team, run, step, ranks, miss, shard, t0_ns))
    out.sort(key=lambda c: c.dir)
    return out


def block_size(size: int) -> int:
    """The agent's block size for a file: 1 MiB, doubled while the file would have more than 10,000 blocks."""
    block = 1 << 20
    while -(-size // block) > 10_000:
        block *= 2
    return block


def crc_fields(path: str, size: int, mtime: float, *, blocks: bool) -> dict:
    """What ``ckptfleet-agent --checksums`` sends besides the sha256 (docs/wire-format.md, Checksums): a
    ``crc32``, ``checksummed_at`` and, with ``blocks``, one CRC32 per block of a file larger than one block.

    Deterministic per path, so two copies of a file agree. The values are not the CRCs of any content (the
    synthetic files have none), and the whole-file CRC is not the combination of the block CRCs: the
    server compares like with like and never checks one against the other for two copies that both have
    a sha256. The block CRCs are ``shake_128(path)`` bytes, one C call per file instead of one per block.
    """
    checksums: dict = {"crc32": f"{zlib.crc32(path.encode()):08x}"}
    block = block_size(size)
    if blocks and size > block:
        raw = hashlib.shake_128(path.encode()).digest(4 * -(-size // block))
        checksums["blocks"] = {"size": block, "crc32": base64.b64encode(raw).decode()}
    # The agent hashes a file after it is written: its checksums are a little younger than its mtime.
    return {"checksums": checksums, "checksummed_at": round(mtime + 30.0, 3)}


def file_lines(ckpts: list[Ckpt], *, checksums: bool, crc: bool = False, blocks: bool = False) -> Iterator[dict]:
    """The ``file`` lines of the inventory, in path order, as the agent would send them (``crc``: with the
    CRCs and ``checksummed_at`` of ``--checksums`` since the agent computes CRCs; ``blocks``: and block CRCs)."""
    for c in ckpts:
        rng = random.Random(c.t0_ns)  # deterministic per checkpoint: the baseline rebuilds the same rows
        sizes = {}
        mtimes = {}
        for rank in range(c.ranks):
            name = f"__{rank}_0.distcp"
            # DCP shards of one save are nearly equal: the sharded tensors differ by some KiB.
            sizes[name] = c.shard_bytes + rng.randrange(1 << 20)
            mtimes[name] = c.t0_ns + rng.randrange(20 * 10**9)  # ranks finish within ~20 s
        newest = max(mtimes.values())
        meta = {
            "size": 4096 + 160 * c.ranks,
            "mtime_ns": newest + 2 * 10**9,  # the coordinator writes the manifest last
            "facts": {"kind": "dcp_metadata", "files": dict(sizes)},
        }
        names = sorted([".metadata", *(n for i, n in enumerate(sizes) if i != c.missing)])
        for name in names:
            path = f"{c.dir}/{name}"
            if name == ".metadata":
                line = {"type": "file", "path": path, "size": meta["size"], "mtime": meta["mtime_ns"] / 1e9}
            else:
                line = {"type": "file", "path": path, "size": sizes[name], "mtime": mtimes[name] / 1e9}
            if checksums:
                line["sha256"] = hashlib.sha256(path.encode()).hexdigest()
                if crc:
                    line.update(crc_fields(path, line["size"], line["mtime"], blocks=blocks))
            if name == ".metadata":
                line["facts"] = meta["facts"]
            yield line


def write_inventory(
    path: Path,
    ckpts: list[Ckpt],
    root: str,
    *,
    checksums: bool,
    crc: bool = False,
    blocks: bool = False,
    host: str = HOST,
) -> dict:
    """gzip NDJSON (level 6, like the agent), encoded with ``fleet.agent.encode_line``."""
    t0 = time.perf_counter()
    files = 0
    total = 0
    header = {
        "type": "header",
        "format": "ckptfleet-inventory/1",
        "host": host,
        "root": root,
        "agent": f"ckptfleet-bench ({AGENT})",
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with (
        path.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz,
    ):
        batch = [encode_line(header)]
        pending = 0
        for line in file_lines(ckpts, checksums=checksums, crc=crc, blocks=blocks):
            data = encode_line(line)
            batch.append(data)
            pending += len(data)
            files += 1
            total += line["size"]
            if pending >= 256 * 1024:
                gz.write(b"".join(batch))
                batch, pending = [], 0
        batch.append(encode_line({"type": "end", "files": files, "bytes": total}))
        gz.write(b"".join(batch))
    seconds = time.perf_counter() - t0
    return {"files": files, "bytes": total, "seconds": seconds, "gz_bytes": path.stat().st_size}


# --- processes ------------------------------------------------------------------------------------


def venv_python() -> str:
    candidate = REPO / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_manage(env: dict, *args: str) -> str:
    done = subprocess.run(
        [venv_python(), "manage.py", *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"bench: manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def proc_status(pid: int) -> dict[str, int]:
    """VmHWM / VmRSS of a process in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0])
    return out


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class BackendCpu:
    """CPU seconds spent by PostgreSQL backends of the bench database while it runs.

    The machine may be shared, so wall times alone can mislead: this samples ``/proc/<pid>/stat`` of
    every backend connected to the bench database (but its own) every 50 ms and keeps the last value
    seen per backend. A backend that exits loses at most its last 50 ms.
    """

    def __init__(self) -> None:
        import threading

        self.seen: dict[int, float] = {}
        self.start: dict[int, float] = {}
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, conn) -> None:
        pids = [
            r[0]
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (DB_NAME,)
            ).fetchall()
        ]
        for pid in pids:
            try:
                self.seen[pid] = cpu_seconds(pid)
            except OSError:
                pass

    def _run(self) -> None:
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


class Services:
    """gunicorn + a solo Celery worker on the bench database; stopped in ``stop`` whatever happened."""

    def __init__(self, env: dict, logdir: Path, web_workers: int) -> None:
        self.env = env
        self.logdir = logdir
        self.web_workers = web_workers
        self.port = free_port()
        self.web: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self.worker_log = logdir / "worker.log"
        self.web_log = logdir / "gunicorn.log"

    def start(self) -> None:
        py = venv_python()
        self.web = subprocess.Popen(
            [
                py,
                "-m",
                "gunicorn",
                "ckptfleet.wsgi:application",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(self.web_workers),
                "--worker-class",
                "sync",
                "--timeout",
                "600",
                "--error-logfile",
                "-",
                "--log-level",
                "info",
            ],
            cwd=REPO,
            env=self.env,
            stdout=self.web_log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.worker = subprocess.Popen(
            [
                py,
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
                "bench@%h",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=REPO,
            env=self.env,
            stdout=self.worker_log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 90
        web_up = worker_up = False
        while not (web_up and worker_up):
            if time.monotonic() > deadline:
                raise SystemExit(f"bench: gunicorn or the worker did not come up in 90 s; see {self.logdir}")
            for name, proc, log in (
                ("gunicorn", self.web, self.web_log),
                ("worker", self.worker, self.worker_log),
            ):
                if proc.poll() is not None:
                    raise SystemExit(f"bench: {name} exited: {log.read_text(errors='replace')[-3000:]}")
            if not web_up:
                with socket.socket() as sock:
                    sock.settimeout(0.5)
                    web_up = sock.connect_ex(("127.0.0.1", self.port)) == 0
            if not worker_up:
                worker_up = " ready." in self.worker_log.read_text(errors="replace")
            time.sleep(0.2)

    def stop(self) -> None:
        for proc in (self.worker, self.web):
            if proc is None or proc.poll() is not None:
                continue
            # A solo worker shuts down warm (finishing its task) on SIGTERM; a cold stop is what we want.
            proc.send_signal(signal.SIGQUIT if proc is self.worker else signal.SIGTERM)
        for proc in (self.worker, self.web):
            if proc is None:
                continue
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def worker_memory(self) -> dict[str, int]:
        return proc_status(self.worker.pid)

    def web_memory(self) -> dict[str, int]:
        peaks = [proc_status(pid) for pid in children(self.web.pid)]
        return {
            "VmHWM": max((p["VmHWM"] for p in peaks), default=0),
            "VmRSS": max((p["VmRSS"] for p in peaks), default=0),
        }

    def applied_log(self, inventory_id: int, timeout: float = 30) -> dict | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for m in APPLIED_LOG.finditer(self.worker_log.read_text(errors="replace")):
                if int(m["id"]) == inventory_id:
                    return {
                        k: (v if k == "mode" else float(v) if k.endswith("_s") else int(v))
                        for k, v in m.groupdict().items()
                    }
            time.sleep(0.1)
        return None


# --- HTTP -----------------------------------------------------------------------------------------


def post_inventory(port: int, token: str, path: Path) -> dict:
    """Stream the file as the agent does (http.client, Content-Length); return the 202 answer."""
    length = path.stat().st_size
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    try:
        conn.putrequest("POST", "/api/v1/inventories/", skip_accept_encoding=True)
        conn.putheader("Authorization", f"Bearer {token}")
        conn.putheader("User-Agent", AGENT)
        conn.putheader("Accept", "application/json")
        conn.putheader("Content-Type", "application/x-ndjson")
        conn.putheader("Content-Encoding", "gzip")
        conn.putheader("Content-Length", str(length))
        conn.endheaders()
        with path.open("rb") as f:
            while block := f.read(1024 * 1024):
                conn.send(block)
        response = conn.getresponse()
        answer = response.read()
    finally:
        conn.close()
    if response.status != 202:
        raise SystemExit(f"bench: upload answered {response.status}: {answer[:500]!r}")
    return json.loads(answer)


def get_inventory(port: int, token: str, inventory_id: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(
            "GET",
            f"/api/v1/inventories/{inventory_id}/",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
        response = conn.getresponse()
        answer = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise SystemExit(f"bench: polling answered {response.status}: {answer[:500]!r}")
    return json.loads(answer)


def push(
    services: Services, token: str, path: Path, *, label: str, profile: Path | None = None, timeout: float = 3600
) -> dict:
    """POST, then poll every 0.1 s until applied or failed. Times are from POST start."""
    say(f"{label}: POST {path.name} ({path.stat().st_size / 2**20:.1f} MiB)")
    spy = None
    if profile is not None:
        spy = subprocess.Popen(
            [
                os.environ.get("PY_SPY") or shutil.which("py-spy") or str(Path(venv_python()).parent / "py-spy"),
                "record",
                "-p",
                str(services.worker.pid),
                "-r",
                "50",
                "--format",
                "raw",
                "-o",
                str(profile),
                "--nonblocking",
                "--idle",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(1)
    load = os.getloadavg()[0]
    worker_cpu0 = cpu_seconds(services.worker.pid)
    with BackendCpu() as backends:
        t0 = time.perf_counter()
        doc = post_inventory(services.port, token, path)
        t_202 = time.perf_counter() - t0
        inventory_id = doc["id"]
        while True:
            state = get_inventory(services.port, token, inventory_id)
            if state["status"] in ("applied", "failed"):
                break
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"bench: inventory {inventory_id} not applied after {timeout:.0f} s")
            time.sleep(0.1)
        e2e = time.perf_counter() - t0
    worker_cpu = cpu_seconds(services.worker.pid) - worker_cpu0
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)
    if state["status"] != "applied":
        raise SystemExit(f"bench: inventory {inventory_id} failed: line {state['error_line']}: {state['error']}")
    phases = services.applied_log(inventory_id)
    received = datetime.fromisoformat(state["received_at"])
    started = datetime.fromisoformat(state["started_at"])
    finished = datetime.fromisoformat(state["finished_at"])
    result = {
        "id": inventory_id,
        "upload_s": t_202,
        "e2e_s": e2e,
        "files": state["files_count"],
        "added": state["files_added"],
        "changed": state["files_changed"],
        "gone": state["files_gone"],
        "checkpoints_found": state["checkpoints_found"],
        "queue_s": (started - received).total_seconds(),
        "task_s": (finished - started).total_seconds(),
        "phases": phases,
        "worker_cpu_s": worker_cpu,
        "pg_cpu_s": backends.seconds,
        "load_1min": load,
        "worker": services.worker_memory(),
        "web": services.web_memory(),
    }
    say(
        f"{label}: inventory {inventory_id} applied in {e2e:.2f} s (upload {t_202:.2f} s, worker CPU "
        f"{worker_cpu:.2f} s, PostgreSQL CPU {backends.seconds:.2f} s, load {load:.1f}); phases {phases}"
    )
    return result


# --- database -------------------------------------------------------------------------------------


def recreate_database() -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB_NAME}")


def drop_database() -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB_NAME} WITH (FORCE)")


def checkpoint() -> None:
    """Flush dirty buffers so that each measured step starts from the same state."""
    with psycopg.connect(PG_BENCH, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def scalar(sql: str, params=()) -> object:
    with psycopg.connect(PG_BENCH, autocommit=True) as conn:
        return conn.execute(sql, params).fetchone()[0]


def scalar_rows(sql: str, params=()) -> list[tuple]:
    with psycopg.connect(PG_BENCH, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def location_of(host: str, root: str) -> int:
    return scalar(
        "SELECT l.id FROM fleet_storagelocation l JOIN fleet_host h ON h.id = l.host_id"
        " WHERE h.name = %s AND l.root_path = %s",
        (host, root),
    )


def verification_counts(location_id: int) -> dict[str, dict[str, int]]:
    """{state: {verification: copies}} of a location's present copies: a complete copy can be verified, a
    partial one (a rank missing) never is."""
    out: dict[str, dict[str, int]] = {}
    for state, verification, n in scalar_rows(
        "SELECT state, verification, count(*) FROM catalog_checkpointcopy WHERE location_id = %s"
        " AND gone_at IS NULL GROUP BY state, verification ORDER BY 1, 2",
        (location_id,),
    ):
        out.setdefault(state, {})[verification] = n
    return out


def extra_columns() -> tuple[list[str], tuple]:
    """NOT NULL columns of catalog_shardfile beyond BASELINE_COLS that have no database default (Django
    keeps defaults in Python), with the empty value the ingest writes for a host inventory's file."""
    empty = {"text": "", "character varying": "", "boolean": False, "bigint": 0, "integer": 0}
    with psycopg.connect(PG_BENCH, autocommit=True) as conn:
        found = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'catalog_shardfile'"
            " AND is_nullable = 'NO' AND column_default IS NULL AND is_identity = 'NO' ORDER BY ordinal_position"
        ).fetchall()
    base = {c.strip() for c in BASELINE_COLS.split(",")}
    extra = [(name, kind) for name, kind in found if name not in base]
    unknown = [f"{n} ({k})" for n, k in extra if k not in empty]
    if unknown:
        raise SystemExit(f"bench: no empty value known for NOT NULL column(s) {', '.join(unknown)}")
    return [n for n, _ in extra], tuple(empty[k] for _, k in extra)


def rows_for_baseline(ckpts: list[Ckpt], location_id: int, *, checksums: bool, extra: tuple) -> list[tuple]:
    """The rows the ingest writes into catalog_shardfile, as Python values, prepared before timing."""
    now = datetime.now(UTC)
    rows = []
    for line in file_lines(ckpts, checksums=checksums):
        facts = line.get("facts")
        sha = line.get("sha256")
        rows.append(
            (
                location_id,
                line["path"],
                line["size"],
                datetime.fromtimestamp(line["mtime"], UTC),
                sha or "",
                "sha256" if sha else "",
                json.dumps(facts, sort_keys=True, separators=(",", ":")) if facts is not None else None,
                now,
                now,
                *extra,
            )
        )
    return rows


def baseline_copy(rows: list[tuple], columns: str) -> dict:
    """COPY the prepared rows into a table indexed like catalog_shardfile; time COPY + commit only."""
    with psycopg.connect(PG_BENCH) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_copy")
        conn.execute("CREATE TABLE bench_copy (LIKE catalog_shardfile INCLUDING ALL)")
        conn.commit()
        checkpoint()
        backend = conn.info.backend_pid
        load = os.getloadavg()[0]
        cpu0, pg0 = time.process_time(), cpu_seconds(backend)
        t0 = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY bench_copy ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        conn.commit()
        seconds = time.perf_counter() - t0
        cpu, pg_cpu = time.process_time() - cpu0, cpu_seconds(backend) - pg0
        count = conn.execute("SELECT count(*) FROM bench_copy").fetchone()[0]
        conn.execute("DROP TABLE bench_copy")
        conn.commit()
    assert count == len(rows), (count, len(rows))
    return {"s": seconds, "client_cpu_s": cpu, "pg_cpu_s": pg_cpu, "load_1min": load}


def baseline_parse_copy(path: Path, location_id: int, columns: str, extra: tuple) -> dict:
    """Read the gzip NDJSON, parse every line (as strictly typed as the ingest) and COPY it: one stream."""
    with psycopg.connect(PG_BENCH) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_copy")
        conn.execute("CREATE TABLE bench_copy (LIKE catalog_shardfile INCLUDING ALL)")
        conn.commit()
        checkpoint()
        backend = conn.info.backend_pid
        load = os.getloadavg()[0]
        cpu0, pg0 = time.process_time(), cpu_seconds(backend)
        t0 = time.perf_counter()
        now = datetime.now(UTC)
        count = 0
        with (
            gzip.open(path, "rb") as gz,
            conn.cursor() as cur,
            cur.copy(f"COPY bench_copy ({columns}) FROM STDIN") as copy,
        ):
            for raw in gz:
                obj = json.loads(raw)
                if obj.get("type") != "file":
                    continue
                facts = obj.get("facts")
                sha = obj.get("sha256")
                copy.write_row(
                    (
                        location_id,
                        obj["path"],
                        obj["size"],
                        datetime.fromtimestamp(obj["mtime"], UTC),
                        sha or "",
                        "sha256" if sha else "",
                        json.dumps(facts, sort_keys=True, separators=(",", ":")) if facts is not None else None,
                        now,
                        now,
                        *extra,
                    )
                )
                count += 1
        conn.commit()
        seconds = time.perf_counter() - t0
        cpu, pg_cpu = time.process_time() - cpu0, cpu_seconds(backend) - pg0
        conn.execute("DROP TABLE bench_copy")
        conn.commit()
    return {"s": seconds, "client_cpu_s": cpu, "pg_cpu_s": pg_cpu, "load_1min": load, "rows": count}


def source_state() -> dict:
    """The commit measured, and which tracked files differed from it (others edit the tree meanwhile)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout if done.returncode == 0 else ""

    dirty = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    commit = git("rev-parse", "--short", "HEAD").strip() or os.environ.get("BENCH_SOURCE", "unknown")
    return {"commit": commit, "modified": dirty}


def pg_facts() -> dict:
    with psycopg.connect(PG_BENCH, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        settings = dict(
            conn.execute(
                "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
                (
                    [
                        "shared_buffers",
                        "work_mem",
                        "synchronous_commit",
                        "fsync",
                        "max_wal_size",
                        "autovacuum",
                    ],
                ),
            ).fetchall()
        )
    return {"version": version, "settings": settings}


# --- report ---------------------------------------------------------------------------------------


def mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


def rate(n: int, seconds: float) -> str:
    return f"{n / seconds:,.0f}" if seconds > 0 else "-"


def report(r: dict) -> str:
    """A Markdown table. CPU is reported next to wall time because the machine may be shared:
    "CPU" of a push is the worker process plus the PostgreSQL backends of the bench database;
    of a baseline, the bench process plus its backend."""
    n = r["files"]
    first, again = r["first"], r["repush"]
    copy, parse = r["baseline_copy"], r["baseline_parse_copy"]
    p1, p2 = first["phases"] or {}, again["phases"] or {}
    nan = float("nan")
    lines = []

    def row(label: str, value: str, extra: str = "") -> None:
        lines.append(f"| {label} | {value} | {extra} |")

    def cpu(d: dict, client: str) -> float:
        return d[client] + d["pg_cpu_s"]

    first_cpu = cpu(first, "worker_cpu_s")
    copy_cpu = cpu(copy, "client_cpu_s")
    parse_cpu = cpu(parse, "client_cpu_s")
    lines += ["| measure | value | note |", "|---|---|---|"]
    source = r.get("source", {})
    modified = ", ".join(source.get("modified", [])) or "none"
    row("source", f"commit {source.get('commit', '?')}", f"modified tracked files: {modified}")
    row("settings", f"CKPTFLEET_DEBUG={1 if r.get('debug', True) else 0}", "DEBUG keeps the last 9,000 SQL queries")
    row("files (rows)", f"{n:,}", f"{r['checkpoints']:,} DCP checkpoints, {r['partial_expected']} missing a rank")
    row(
        "inventory (gzip NDJSON)",
        f"{r['gz_bytes'] / 2**20:.1f} MiB",
        f"generated with fleet.agent.encode_line in {r['generate_s']:.2f} s (agent's cost, not counted)",
    )
    row(
        "**end-to-end** (POST start -> applied)",
        f"**{first['e2e_s']:.2f} s**",
        f"{rate(n, first['e2e_s'])} rows/s; CPU {first['worker_cpu_s']:.1f} s worker + "
        f"{first['pg_cpu_s']:.1f} s PostgreSQL; load {first['load_1min']:.1f}",
    )
    row(
        "baseline: COPY prepared rows + commit",
        f"{copy['s']:.2f} s",
        f"{rate(n, copy['s'])} rows/s; CPU {copy['client_cpu_s']:.1f} s client + {copy['pg_cpu_s']:.1f} s "
        f"PostgreSQL; load {copy['load_1min']:.1f}",
    )
    row(
        "baseline: parse gzip NDJSON + COPY + commit",
        f"{parse['s']:.2f} s",
        f"{rate(n, parse['s'])} rows/s; CPU {parse['client_cpu_s']:.1f} s client + {parse['pg_cpu_s']:.1f} s "
        f"PostgreSQL; load {parse['load_1min']:.1f}",
    )
    row(
        "**ratio end-to-end / COPY**",
        f"**{first['e2e_s'] / copy['s']:.1f}x**",
        f"target: within 2x; in CPU seconds {first_cpu / copy_cpu:.1f}x",
    )
    row(
        "ratio end-to-end / parse+COPY",
        f"{first['e2e_s'] / parse['s']:.1f}x",
        f"in CPU seconds {first_cpu / parse_cpu:.1f}x",
    )
    row("upload (POST -> 202)", f"{first['upload_s']:.2f} s", "gunicorn spools the body to the media dir")
    row("queue (received -> task started)", f"{first['queue_s']:.2f} s", "")
    row("task (started -> finished)", f"{first['task_s']:.2f} s", "from the inventory's timestamps")
    # The log line's four phases mean different things per apply mode (ingest.inventory.log_applied's callers).
    labels = {
        "direct": (
            "one pass: parse, recognise, judge, COPY (beside the next batch)",
            "the last batch's verification",
            "usage rollup (from the sums written) and the inventory's own rows",
        ),
    }.get(p1.get("mode"), ("parse + COPY into ingestrow", "3 set-based statements", "location_recognize"))
    stage_s = p1.get("stage_s", nan)
    row(f"  mode {p1.get('mode')}: {labels[0]}", f"{stage_s:.2f} s", f"{rate(n, p1.get('stage_s', 0))} rows/s")
    row(
        f"  then: {labels[1]}",
        f"{p1.get('merge_s', nan):.2f} s",
        f"+{p1.get('added')} ~{p1.get('changed')} -{p1.get('gone')}",
    )
    row(f"  then: {labels[2]}", f"{p1.get('judge_s', nan):.2f} s", f"{p1.get('judged')} checkpoint copies")
    row("  committed", f"{p1.get('commit_s', nan):.2f} s", "")
    states = r["states"]
    other = sum(v for k, v in states.items() if k not in ("complete", "partial"))
    row("catalog_shardfile rows of the location", f"{r['shardfile_rows']:,}", f"expected {n:,}")
    row(
        "copies found: complete / partial / other",
        f"{states.get('complete', 0)} / {states.get('partial', 0)} / {other}",
        f"expected {r['checkpoints'] - r['partial_expected']} / {r['partial_expected']} / 0",
    )
    row(
        "**re-push, same inventory**: added/changed/gone",
        f"{again['added']}/{again['changed']}/{again['gone']}",
        "must be 0/0/0",
    )
    row(
        "re-push end-to-end",
        f"{again['e2e_s']:.2f} s",
        f"staged {p2.get('stage_s', nan):.2f} s, merged {p2.get('merge_s', nan):.2f} s, "
        f"judged {p2.get('judge_s', nan):.2f} s, committed {p2.get('commit_s', nan):.2f} s; "
        f"CPU {again['worker_cpu_s']:.1f} s + {again['pg_cpu_s']:.1f} s",
    )
    row("rows with changed_by = re-push", f"{r['changed_by_repush']:,}", "must be 0")
    mem = r["memory"]
    row("worker peak RSS (VmHWM), idle", mib(mem["idle"]), "solo pool: the task runs in this process")
    if "probe" in mem:
        probe = r["probe"]
        row(
            f"worker VmHWM after the probe ({r['probe_files']:,} files)",
            mib(mem["probe"]),
            f"its own fresh location, first; applied in {probe['e2e_s']:.2f} s",
        )
    if "probe_copy" in mem:
        row(
            f"worker VmHWM after a second copy of the probe ({r['probe_files']:,} files)",
            mib(mem["probe_copy"]),
            "verified against the first probe's copies, as the big push is for the checkpoints it shares "
            f"with them; applied in {r['probe_copy']['e2e_s']:.2f} s",
        )
    row(f"worker VmHWM after the first push ({n:,} files)", mib(mem["first"]), "peak since the worker started")
    row("worker VmHWM after the re-push", mib(mem["repush"]), "")
    row("gunicorn worker VmHWM", mib(mem["web"]), "")
    if "second" in r:
        lines += ["", *second_copy_report(r)]
    return "\n".join(lines)


def apply_s(push_result: dict) -> float:
    """The apply itself: the worker's log line (its four phases), else the inventory's started -> finished."""
    p = push_result["phases"]
    return sum(p[k] for k in ("stage_s", "merge_s", "judge_s", "commit_s")) if p else push_result["task_s"]


def second_copy_report(r: dict) -> list[str]:
    """The first copy's apply (nothing to compare with) beside the second copy's (every file compared)."""
    a, b = r["first"], r["second"]
    pa, pb = a["phases"] or {}, b["phases"] or {}
    kinds = "sha256" + (" + checksums.crc32 + checksummed_at" if r.get("crc") else "")
    kinds += " + checksums.blocks" if r.get("blocks") else ""
    lines = [
        f"| second copy ({kinds}) | A: {HOST}, alone | B: {SECOND_HOST}, compared with A | B / A |",
        "|---|---|---|---|",
    ]

    def row(label: str, va: float, vb: float, unit: str = " s") -> None:
        ratio = f"{vb / va:.2f}x" if va > 0 else "-"
        lines.append(f"| {label} | {va:.2f}{unit} | {vb:.2f}{unit} | {ratio} |")

    row("**apply** (worker log: the four phases)", apply_s(a), apply_s(b))
    row("task (inventory started -> finished)", a["task_s"], b["task_s"])
    row("end-to-end (POST start -> applied)", a["e2e_s"], b["e2e_s"])
    row("CPU: worker + PostgreSQL", a["worker_cpu_s"] + a["pg_cpu_s"], b["worker_cpu_s"] + b["pg_cpu_s"])
    row("  worker CPU", a["worker_cpu_s"], b["worker_cpu_s"])
    row("  PostgreSQL CPU", a["pg_cpu_s"], b["pg_cpu_s"])
    for key, label in (
        ("stage_s", "one pass (verification of all batches but the last inside)"),
        ("merge_s", "the last batch's verification"),
        ("judge_s", "usage rollup, bookkeeping"),
    ):
        if key in pa and key in pb:
            row(f"  {label}", pa[key], pb[key])
    lines.append(f"| mode | {pa.get('mode')} | {pb.get('mode')} | |")
    lines.append(f"| load (1 min) at POST | {a['load_1min']:.1f} | {b['load_1min']:.1f} | |")
    lines.append(f"| inventory, gzip | {r['gz_bytes'] / 2**20:.1f} MiB | same files | |")

    def verdicts(counts: dict) -> str:
        return "; ".join(
            f"{state}: " + ", ".join(f"{n} {v}" for v, n in sorted(by.items())) for state, by in sorted(counts.items())
        )

    lines.append(
        f"| copies after B: state: verification | {verdicts(r['verification_a'])} | {verdicts(r['verification_b'])} | "
        f"A before B: {verdicts(r['verification_a_alone'])} |"
    )
    ok = all(
        set(counts.get("complete", {})) == {"verified"} and not set(counts) - {"complete", "partial"}
        for counts in (r["verification_a"], r["verification_b"])
    )
    lines.append(
        "| **every complete copy verified** | "
        + ("yes: the comparison ran on every file" if ok else "**NO: the bench measured something else**")
        + " | | |"
    )
    return lines


# --- main -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    global DB_NAME, PG_BENCH, REDIS_URL
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--checkpoints", type=int, default=1_000)
    parser.add_argument(
        "--probe-files",
        type=int,
        default=None,
        help="files of the memory probe inventory on a fresh location (0: skip; default 100,000, 0 with --second-copy)",
    )
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--checksums", action="store_true", help="send a sha256 with every file")
    parser.add_argument(
        "--crc",
        action="store_true",
        help="with --checksums: also the agent's checksums {crc32} and checksummed_at, as it sends since CRCs",
    )
    parser.add_argument(
        "--blocks",
        action="store_true",
        help="with --crc: also checksums.blocks (a CRC32 per MiB block; 300-4,000 per shard: large lines)",
    )
    parser.add_argument(
        "--second-copy",
        action="store_true",
        help="after the re-push, push the same files as the first inventory of a second host: every file is "
        "compared with the first copy's; reports the two applies side by side (implies --probe-files 0)",
    )
    parser.add_argument("--seed", type=int, default=20251121)
    parser.add_argument("--keep", action="store_true", help="keep the database and the temp directory")
    parser.add_argument(
        "--no-debug",
        action="store_true",
        help="run gunicorn and the worker with CKPTFLEET_DEBUG=0 (a throw-away DJANGO_SECRET_KEY): no SQL query log",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="FILE",
        help="record the worker with py-spy (pip install py-spy) during the first push, collapsed stacks",
    )
    parser.add_argument(
        "--database",
        default=DB_NAME,
        help=f"name of the PostgreSQL database to drop, create and use (default {DB_NAME})",
    )
    parser.add_argument(
        "--redis-url", default=REDIS_URL, help=f"Redis db for the worker's broker, flushed first (default {REDIS_URL})"
    )
    args = parser.parse_args(argv)
    if args.crc and not args.checksums:
        parser.error("--crc adds to --checksums (the agent sends CRCs only with a sha256)")
    if args.blocks and not args.crc:
        parser.error("--blocks adds to --crc")
    if args.second_copy and args.probe_files:
        # The probes are copies of the big push's first checkpoints: A would be verified against them.
        parser.error("--second-copy needs --probe-files 0: the first copy must have nothing to compare with")
    if args.probe_files is None:
        args.probe_files = 0 if args.second_copy else 100_000
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", args.database):
        parser.error("--database must be a plain lowercase identifier")
    DB_NAME = args.database
    PG_BENCH = f"postgres://postgres@127.0.0.1:5432/{DB_NAME}"
    REDIS_URL = args.redis_url

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    # Also when started in the background by a shell that ignores SIGINT for its jobs.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    tmp = Path(tempfile.mkdtemp(prefix="ckptfleet-bench-"))
    AUDIT_KEY = ("CKPTFLEET_AUDIT_KEY", "CKPTFLEET_AUDIT_KEY_FILE")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "DJANGO_SECRET_KEY_FILE", *AUDIT_KEY)},
        "DATABASE_URL": PG_BENCH,
        "REDIS_URL": REDIS_URL,
        "CKPTFLEET_DEBUG": "1",
        "CKPTFLEET_VAR_DIR": str(tmp / "var"),
        "MEDIA_ROOT": str(tmp / "media"),
        "CELERY_TASK_ALWAYS_EAGER": "0",
        "PYTHONUNBUFFERED": "1",
    }
    if args.no_debug:
        import secrets

        # gunicorn answers the agent over plain HTTP on 127.0.0.1: no redirect to HTTPS.
        # Production settings need the audit chain's key too (since session 9): a throw-away one, as the secret key.
        env.update(
            CKPTFLEET_DEBUG="0",
            CKPTFLEET_PLAIN_HTTP="1",
            DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
            CKPTFLEET_AUDIT_KEY=secrets.token_urlsafe(50),
        )
    (tmp / "var").mkdir()
    (tmp / "media").mkdir()
    services = Services(env, tmp, args.web_workers)
    ok = False
    results: dict = {
        "files": args.files,
        "checkpoints": args.checkpoints,
        "probe_files": args.probe_files,
        "checksums": args.checksums,
        "crc": args.crc,
        "blocks": args.blocks,
        "debug": not args.no_debug,
    }
    try:
        say(f"database {DB_NAME}: drop, create, migrate")
        recreate_database()
        t0 = time.perf_counter()
        run_manage(env, "migrate", "--noinput", "-v", "0")
        say(f"migrated in {time.perf_counter() - t0:.1f} s")
        out = run_manage(
            env,
            "fleet_host",
            "add",
            HOST,
            "--root",
            ROOT,
            "--root",
            PROBE_ROOT,
            "--root",
            PROBE_COPY_ROOT,
            "--tier",
            "nvme",
        )
        token = next(line.strip() for line in out.splitlines() if line.startswith("cfh_"))
        location_id = location_of(HOST, ROOT)
        if args.second_copy:
            out = run_manage(env, "fleet_host", "add", SECOND_HOST, "--root", ROOT, "--tier", "nvme")
            token_b = next(line.strip() for line in out.splitlines() if line.startswith("cfh_"))
            location_b = location_of(SECOND_HOST, ROOT)
        results["postgres"] = pg_facts()
        results["source"] = source_state()

        import redis

        redis.Redis.from_url(REDIS_URL).flushdb()

        ckpts = plan(args.files, args.checkpoints, args.seed)
        results["partial_expected"] = sum(1 for c in ckpts if c.missing is not None)
        inventory = tmp / "inventory.ndjson.gz"
        say(f"generating {args.files:,} file lines with fleet.agent.encode_line")
        if args.blocks:
            say("--blocks: every shard line carries 300-4,000 block CRCs (~0.4-5 KiB each, base64): size the run")
        kinds = {"checksums": args.checksums, "crc": args.crc, "blocks": args.blocks}
        gen = write_inventory(inventory, ckpts, ROOT, **kinds)
        assert gen["files"] == args.files, gen
        results.update(generate_s=gen["seconds"], gz_bytes=gen["gz_bytes"], bytes=gen["bytes"])
        say(f"generated in {gen['seconds']:.2f} s: {gen['gz_bytes'] / 2**20:.1f} MiB gzip")

        # Baselines first, on the freshly migrated database, each from a checkpointed state.
        say("baseline: preparing the same rows in memory")
        extra_names, extra = extra_columns()
        columns = ", ".join([BASELINE_COLS, *extra_names])
        results["baseline_columns"] = columns
        rows = rows_for_baseline(ckpts, location_id, checksums=args.checksums, extra=extra)
        say(f"baseline: COPY into bench_copy (LIKE catalog_shardfile INCLUDING ALL) ({columns})")
        results["baseline_copy"] = baseline_copy(rows, columns)
        del rows
        say(f"baseline COPY: {results['baseline_copy']}")
        results["baseline_parse_copy"] = baseline_parse_copy(inventory, location_id, columns, extra)
        assert results["baseline_parse_copy"]["rows"] == args.files, results["baseline_parse_copy"]
        say(f"baseline parse+COPY: {results['baseline_parse_copy']}")

        say(f"starting gunicorn on 127.0.0.1:{services.port} and a solo Celery worker (logs in {tmp})")
        services.start()
        memory = {"idle": services.worker_memory()["VmHWM"]}

        if args.probe_files:
            # The big push's first checkpoints, file for file: copies of them as a replica holds them, so
            # that the big push verifies those checkpoints against two agreeing copies.
            probe_checkpoints = max(1, round(args.checkpoints * args.probe_files / args.files))
            probe_ckpts = ckpts[:probe_checkpoints]
            probe = tmp / "probe.ndjson.gz"
            write_inventory(probe, probe_ckpts, PROBE_ROOT, checksums=args.checksums)
            checkpoint()
            results["probe"] = push(services, token, probe, label=f"probe ({args.probe_files:,} files)")
            memory["probe"] = results["probe"]["worker"]["VmHWM"]
            # The same checkpoints at a second location: verification now also reads the first
            # probe's copies, as the big push will for the checkpoints it shares with the probes.
            # The peak after this is what the big push is compared with (memory flat in its size).
            probe_copy = tmp / "probe-copy.ndjson.gz"
            write_inventory(probe_copy, probe_ckpts, PROBE_COPY_ROOT, checksums=args.checksums)
            checkpoint()
            results["probe_copy"] = push(
                services, token, probe_copy, label=f"probe, second copy ({args.probe_files:,} files)"
            )
            memory["probe_copy"] = results["probe_copy"]["worker"]["VmHWM"]

        checkpoint()
        results["first"] = push(
            services, token, inventory, label=f"first push ({args.files:,} files)", profile=args.py_spy
        )
        memory["first"] = results["first"]["worker"]["VmHWM"]
        with psycopg.connect(PG_BENCH, autocommit=True) as conn:
            results["states"] = dict(
                conn.execute(
                    "SELECT state, count(*) FROM catalog_checkpointcopy WHERE location_id = %s GROUP BY state",
                    (location_id,),
                ).fetchall()
            )
        results["shardfile_rows"] = scalar(
            "SELECT count(*) FROM catalog_shardfile WHERE location_id = %s", (location_id,)
        )

        checkpoint()
        results["repush"] = push(services, token, inventory, label="re-push (same inventory)")
        memory["repush"] = results["repush"]["worker"]["VmHWM"]
        memory["web"] = services.web_memory()["VmHWM"]
        results["changed_by_repush"] = scalar(
            "SELECT count(*) FROM catalog_shardfile WHERE changed_by_id = %s", (results["repush"]["id"],)
        )
        results["memory"] = memory
        if args.second_copy:
            results["verification_a_alone"] = verification_counts(location_id)
            second = tmp / "second-copy.ndjson.gz"
            write_inventory(second, ckpts, ROOT, host=SECOND_HOST, **kinds)
            checkpoint()
            results["second"] = push(
                services, token_b, second, label=f"second copy on {SECOND_HOST} ({args.files:,} files)"
            )
            results["verification_a"] = verification_counts(location_id)
            results["verification_b"] = verification_counts(location_b)
            results["states_b"] = dict(
                scalar_rows(
                    "SELECT state, count(*) FROM catalog_checkpointcopy WHERE location_id = %s GROUP BY state",
                    (location_b,),
                )
            )
            say(
                f"verification: {SECOND_HOST} {results['verification_b']}, {HOST} {results['verification_a']} "
                f"(before the second copy: {results['verification_a_alone']})"
            )
        ok = True
    finally:
        services.stop()
        if args.keep:
            say(f"kept database {DB_NAME} and {tmp}")
        else:
            try:
                drop_database()
            except psycopg.Error as exc:
                say(f"could not drop {DB_NAME}: {exc}")
            if ok:
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                say(f"failed or interrupted: logs kept in {tmp}")

    table = report(results)
    print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        say("interrupted; processes stopped")
        sys.exit(130)
