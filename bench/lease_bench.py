#!/usr/bin/env python3
"""Lease benchmark: take and renew latency through the real agent API, with 100 jobs renewing at once (issue 17).

What it does, against PostgreSQL (a database of its own, ``ckptfleet_bench`` unless ``--db``) and gunicorn:

1. migrates the database from scratch, registers ``--hosts`` hosts (``fleet.services.host_register``, a location
   each, a token each, as ``manage.py fleet_host add`` does), a run with ``--jobs`` checkpoints, one copy of each
   on one of the hosts; and one more host with nothing, whose token serves the baseline;
2. starts gunicorn on ``ckptfleet.wsgi`` (DEBUG off, ``--workers`` x ``--threads`` gthread workers) on a free port;
3. ``--jobs`` client threads (spread over ``--client-procs`` processes, so that the client's own GIL is not what
   is measured) each take one lease at the same moment (``POST /api/v1/agent/leases/``, the host's token, as
   ``ckptfleet-agent lease take`` does), then renew it in a loop for ``--seconds``
   (``POST /api/v1/agent/leases/<id>/renew/``, as ``lease renew`` does), back to back or every ``--interval``
   seconds;
4. beside them, in the same run and under the same load, ``--baseline-threads`` threads call
   ``GET /api/v1/agent/leases/`` with the empty host's token (the same authentication, one query, nothing
   written) and ``GET /healthz/`` (no authentication, ``SELECT 1``), every ``--baseline-interval`` seconds: the
   server's floor under that load (back to back, they would be a load of their own);
5. from 3 s in (when the burst of takes has drained; the renewals start then too), ``--takers`` threads take a
   lease on a checkpoint of their own and release it, every
   ``--take-interval`` seconds: a job starting and one ending while the 100 renew (the steady take; the 100 takes
   at once at the start are a burst, reported apart).

It prints p50/p95/p99 of the burst of takes, renew, the steady takes and releases and the two baselines, the
requests per second and every error, the 1-minute load average before and after, and the audit events written
(every take and renew is audited in its own transaction). This is a benchmark, not a test: the figures go to
docs/benchmarks.md.

    .venv/bin/python bench/lease_bench.py                       # 100 jobs renewing every 5 s, 30 s
    .venv/bin/python bench/lease_bench.py --interval 0          # back to back: the most the server takes
    .venv/bin/python bench/lease_bench.py --jobs 20 --seconds 10
    make bench-lease BENCH_ARGS="--workers 4 --threads 8"
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing as mp
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PG = "postgres://postgres@127.0.0.1:5432/{db}"
SPARE = 8  # checkpoints for the steady takers, beside the jobs' own


def say(message: str) -> None:
    print(f"[lease-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(db: str, redis_url: str, var_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY_FILE", "CKPTFLEET_AUDIT_KEY_FILE")}
    env.update(
        DATABASE_URL=PG.format(db=db),
        REDIS_URL=redis_url,
        DJANGO_SETTINGS_MODULE="ckptfleet.settings",
        CKPTFLEET_DEBUG="0",
        CKPTFLEET_PLAIN_HTTP="1",  # gunicorn answers over plain HTTP on 127.0.0.1: no redirect to HTTPS
        DJANGO_SECRET_KEY="lease-bench-throwaway-key-not-a-secret-0123456789",
        CKPTFLEET_AUDIT_KEY="lease-bench-throwaway-audit-key-not-a-secret-0123456789",
        CKPTFLEET_VAR_DIR=var_dir,
        CELERY_TASK_ALWAYS_EAGER="1",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
    )
    return env


# --- set-up (inside Django, on the bench database) --------------------------------------------------------------


def setup(jobs: int, hosts: int, out: str) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import transaction
    from django.utils import timezone

    from audit.actor import Actor
    from catalog.models import Checkpoint, CheckpointCopy, Run, Team
    from fleet.services import host_register, host_token_issue, location_add

    call_command("migrate", verbosity=0)
    actor = Actor.command(label="lease-bench")
    now = timezone.now()
    kits = []
    for i in range(hosts + 1):
        host = host_register(name=f"gpu-bench-{i:03d}", site="dc1", region="eu-west", actor=actor)
        location = location_add(
            host=host,
            name=f"{host.name}:/mnt/nvme0/ckpt",
            kind="nvme",
            tier="nvme",
            root_path="/mnt/nvme0/ckpt",
            path_template="{team}/{run}",
            actor=actor,
        )
        kits.append({"host": host.name, "location": location.pk, "token": host_token_issue(host=host, actor=actor)})
    with transaction.atomic():
        team = Team.objects.create(name="bench")
        run = Run.objects.create(team=team, name="lease-bench", status="active")
        checkpoints = Checkpoint.objects.bulk_create(
            [Checkpoint(run=run, step=(i + 1) * 100, first_seen_at=now) for i in range(jobs + SPARE)]
        )
        CheckpointCopy.objects.bulk_create(
            [
                CheckpointCopy(
                    checkpoint=c,
                    location_id=kits[i % hosts]["location"],
                    path=f"bench/lease-bench/step-{c.step}",
                    format="pytorch_dcp",
                    state="complete",
                    first_seen_at=now,
                )
                for i, c in enumerate(checkpoints)
            ]
        )
    specs = [{"checkpoint": c.pk, "token": kits[i % hosts]["token"]} for i, c in enumerate(checkpoints)]
    plan = {
        "jobs": specs[:jobs],
        "spare": specs[jobs:],
        "baseline_token": kits[hosts]["token"],
    }
    Path(out).write_text(json.dumps(plan))


def audit_events(db: str) -> dict:
    import psycopg

    with psycopg.connect(PG.format(db=db)) as conn:
        rows = conn.execute(
            "SELECT action, count(*) FROM catalog_auditevent WHERE action LIKE 'lease.%' GROUP BY action"
        ).fetchall()
    return dict(rows)


def sample_waits(db: str, start_at: float, seconds: float) -> dict:
    """Every 50 ms while the clients run: how many of the database's backends are in a transaction, and how many
    of those wait for a row lock (``wait_event_type = 'Lock'``) -- the audit chain head's, or a lease's."""
    import psycopg

    samples, in_tx, waiting = 0, 0, 0
    with psycopg.connect(PG.format(db="postgres"), autocommit=True) as conn:
        time.sleep(max(0.0, start_at - time.time()))
        end = start_at + seconds
        while time.time() < end:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE state LIKE 'idle in transaction%%' OR xact_start IS NOT NULL "
                "AND state = 'active'), count(*) FILTER (WHERE wait_event_type = 'Lock') "
                "FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [db],
            ).fetchone()
            samples += 1
            in_tx += row[0]
            waiting += row[1]
            time.sleep(0.05)
    return {
        "samples": samples,
        "mean_in_transaction": round(in_tx / max(samples, 1), 2),
        "mean_waiting_for_lock": round(waiting / max(samples, 1), 2),
    }


# --- the clients ------------------------------------------------------------------------------------------------


class Conn:
    """One keep-alive HTTP connection per client thread, opened again when the server closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, token: str | None, body: dict | None = None) -> tuple[int, bytes]:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                payload = response.read()
                if response.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return response.status, payload
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")


def client_proc(port: int, jobs: list[dict], baseline_token: str | None, baselines: int, start_at: float,
                seconds: float, interval: float, queue, baseline_interval: float = 0.0,
                takers: list[dict] | None = None, take_interval: float = 0.5) -> None:  # fmt: skip
    """One client process: a thread per job (take, then renew until the end), ``baselines`` baseline threads, and a
    thread per ``takers`` spec that takes and releases a lease again and again while the jobs renew."""
    takers = takers or []
    settle = min(3.0, seconds / 5)
    results: dict[str, list] = {
        "take (all at once)": [],
        "renew": [],
        "take (while renewing)": [],
        "release (while renewing)": [],
        "agent GET (baseline)": [],
        "healthz (baseline)": [],
    }
    errors: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(jobs) + baselines + len(takers))

    def record(kind: str, ms: float) -> None:
        with lock:
            results[kind].append(ms)

    def fail(what: str) -> None:
        with lock:
            errors.append(what[:300])

    def take(conn: Conn, spec: dict, owner: str, purpose: str, kind: str) -> int | None:
        """Take a lease as ``ckptfleet-agent lease take`` does, timed as ``kind``; its id, or None (recorded)."""
        body = {"checkpoint": spec["checkpoint"], "owner": owner, "purpose": purpose, "ttl_seconds": 600}
        t = time.perf_counter()
        status, payload = conn.request("POST", "/api/v1/agent/leases/", spec["token"], body)
        record(kind, (time.perf_counter() - t) * 1000)
        if status != 201:
            fail(f"take {status}: {payload[:200]!r}")
            return None
        return json.loads(payload)["id"]

    def job(spec: dict) -> None:
        conn = Conn(port)
        barrier.wait()
        time.sleep(max(0.0, start_at - time.time()))
        lease = take(conn, spec, f"job-{spec['checkpoint']}", "resuming", "take (all at once)")
        if lease is None:
            return
        end = start_at + seconds
        # Renewals are measured once the burst of takes has drained (they would otherwise time the burst again).
        time.sleep(max(0.0, start_at + settle - time.time()))
        if interval:
            # Jobs do not renew in step: each starts its rhythm at its own moment within the interval.
            time.sleep(random.uniform(0, interval))
        while time.time() < end:
            t = time.perf_counter()
            try:
                status, payload = conn.request(
                    "POST", f"/api/v1/agent/leases/{lease}/renew/", spec["token"], {"ttl_seconds": 600}
                )
            except OSError as exc:
                fail(f"renew: {exc}")
                continue
            record("renew", (time.perf_counter() - t) * 1000)
            if status != 200:
                fail(f"renew {status}: {payload[:200]!r}")
            if interval:
                time.sleep(interval)

    def baseline() -> None:
        conn = Conn(port)
        barrier.wait()
        time.sleep(max(0.0, start_at - time.time()))
        end = start_at + seconds
        while time.time() < end:
            for kind, path, token in (
                ("agent GET (baseline)", "/api/v1/agent/leases/", baseline_token),
                ("healthz (baseline)", "/healthz/", None),
            ):
                t = time.perf_counter()
                status, payload = conn.request("GET", path, token)
                record(kind, (time.perf_counter() - t) * 1000)
                if status != 200:
                    fail(f"{path} {status}: {payload[:200]!r}")
                if baseline_interval:
                    time.sleep(baseline_interval)

    def taker(spec: dict) -> None:
        """A job starting (take) and another ending (release) while the 100 renew: after the first burst settles."""
        conn = Conn(port)
        barrier.wait()
        time.sleep(max(0.0, start_at + settle - time.time()))
        time.sleep(random.uniform(0, take_interval))
        end = start_at + seconds
        while time.time() < end:
            lease = take(conn, spec, f"taker-{spec['checkpoint']}", "evaluating", "take (while renewing)")
            if lease is None:
                return
            time.sleep(take_interval)
            t = time.perf_counter()
            status, payload = conn.request("POST", f"/api/v1/agent/leases/{lease}/release/", spec["token"], {})
            record("release (while renewing)", (time.perf_counter() - t) * 1000)
            if status != 200:
                fail(f"release {status}: {payload[:200]!r}")
            time.sleep(take_interval)

    threads = [threading.Thread(target=job, args=(spec,)) for spec in jobs]
    threads += [threading.Thread(target=baseline) for _ in range(baselines)]
    threads += [threading.Thread(target=taker, args=(spec,)) for spec in takers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    queue.put((results, errors))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


# --- orchestration ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="ckptfleet_bench", help="PostgreSQL database (dropped and made again)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--jobs", type=int, default=100, help="concurrent jobs, each taking and renewing one lease")
    parser.add_argument("--hosts", type=int, default=10, help="hosts the checkpoints' copies are spread over")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the renewers renew")
    parser.add_argument(
        "--interval",
        type=float,
        default=5.0,
        help="seconds each job waits between its renewals (0: back to back, the most the server can take)",
    )
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (the compose file's default: 3)")
    parser.add_argument("--threads", type=int, default=8, help="threads per gunicorn worker (gthread)")
    parser.add_argument("--client-procs", type=int, default=4, help="client processes the jobs are spread over")
    parser.add_argument("--baseline-threads", type=int, default=2)
    parser.add_argument(
        "--baseline-interval",
        type=float,
        default=0.1,
        help="seconds each baseline thread waits between its calls (0: back to back, which loads the server too)",
    )
    parser.add_argument(
        "--takers", type=int, default=2, help=f"threads taking and releasing leases while the jobs renew (<= {SPARE})"
    )
    parser.add_argument("--take-interval", type=float, default=0.5, help="seconds between a taker's take and release")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--child", choices=["setup"], help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "setup":
        setup(args.jobs, args.hosts, args.out)
        return

    import psycopg

    tmp = Path(tempfile.mkdtemp(prefix="lease-bench-"))
    env = server_env(args.db, args.redis, str(tmp / "var"))
    load_before = load1()
    say(f"load {load_before}; (re)creating database {args.db}")
    with psycopg.connect(PG.format(db="postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{args.db}"')
    plan_file = tmp / "plan.json"
    t = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            "setup",
            "--jobs",
            str(args.jobs),
            "--hosts",
            str(args.hosts),
            "--out",
            str(plan_file),
        ],
        check=True,
        cwd=REPO,
        env=env,
    )
    plan = json.loads(plan_file.read_text())
    say(f"migrated and set up {args.hosts + 1} hosts, {args.jobs} checkpoints in {time.perf_counter() - t:.0f} s")
    port = free_port()
    log = tmp / "gunicorn.log"
    web = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "ckptfleet.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(args.workers),
            "--worker-class",
            "gthread",
            "--threads",
            str(args.threads),
            "--keep-alive",
            "30",
            "--timeout",
            "120",
            "--error-logfile",
            "-",
            "--log-level",
            "warning",
        ],
        cwd=REPO,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if web.poll() is not None:
                raise SystemExit(f"gunicorn exited: {log.read_text(errors='replace')[-3000:]}")
            try:
                status, _ = Conn(port).request("GET", "/healthz/", None)
                if status == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"gunicorn did not answer in 60 s; see {log}")
            time.sleep(0.3)
        # Warm every worker up (imports, first connection) before the clock starts.
        warm = Conn(port)
        for _ in range(args.workers * args.threads * 2):
            warm.request("GET", "/api/v1/agent/leases/", plan["baseline_token"])
            warm.conn = None
        say(
            f"gunicorn up on :{port} ({args.workers} workers x {args.threads} threads); {args.jobs} jobs in "
            f"{args.client_procs} client processes, {args.baseline_threads} baseline threads; load {load1()}"
        )
        queue: mp.Queue = mp.Queue()
        start_at = time.time() + 3.0
        chunks = [plan["jobs"][i :: args.client_procs] for i in range(args.client_procs)]
        procs = []
        for i, chunk in enumerate(chunks):
            baselines = args.baseline_threads if i == 0 else 0
            takers = plan["spare"][: args.takers] if i == 0 else []
            p = mp.Process(
                target=client_proc,
                args=(port, chunk, plan["baseline_token"], baselines, start_at, args.seconds, args.interval, queue),
                kwargs={
                    "baseline_interval": args.baseline_interval,
                    "takers": takers,
                    "take_interval": args.take_interval,
                },
            )
            p.start()
            procs.append(p)
        waits = sample_waits(args.db, start_at, args.seconds)
        gathered = [queue.get() for _ in procs]
        for p in procs:
            p.join()
        load_after = load1()
    finally:
        web.terminate()
        try:
            web.wait(timeout=20)
        except subprocess.TimeoutExpired:
            web.kill()
    results: dict[str, list] = {}
    errors: list[str] = []
    for res, errs in gathered:
        for kind, values in res.items():
            results.setdefault(kind, []).extend(values)
        errors += errs
    events = audit_events(args.db)
    rhythm = "back to back" if not args.interval else f"every {args.interval:g} s"
    pace = "back to back" if not args.baseline_interval else f"every {args.baseline_interval:g} s"
    print(
        f"\nLeases through the agent API: {args.jobs} jobs take a lease at once, then renew it {rhythm} for "
        f"{args.seconds:g} s; meanwhile {args.takers} takers take and release a lease every {args.take_interval:g} s "
        f"and {args.baseline_threads} baseline threads call {pace}; gunicorn {args.workers} workers x {args.threads} "
        f"threads (gthread), DEBUG off, PostgreSQL; {os.cpu_count()} CPUs. Load average (1 min) before "
        f"{load_before}, after {load_after}.\n"
    )
    print("| call | requests | per second | p50 (ms) | p95 (ms) | p99 (ms) | max (ms) |")
    print("|---|---|---|---|---|---|---|")
    figures = {}
    for kind, values in results.items():
        if not values:
            continue
        burst = kind.startswith("take (all")
        figures[kind] = {
            "n": len(values),
            "p50": round(statistics.median(values), 1),
            "p95": round(pct(values, 95), 1),
            "p99": round(pct(values, 99), 1),
            "max": round(max(values), 1),
        }
        f = figures[kind]
        per_second = "-" if burst else f"{len(values) / args.seconds:.0f}"
        print(f"| {kind} | {f['n']:,} | {per_second} | {f['p50']} | {f['p95']} | {f['p99']} | {f['max']} |")
    print(f"\nErrors: {len(errors)}" + "".join(f"\n  {e}" for e in errors[:10]))
    print(f"Audit events written: {events}")
    print(
        f"Database backends, sampled every 50 ms ({waits['samples']} samples): on average "
        f"{waits['mean_in_transaction']} in a transaction, {waits['mean_waiting_for_lock']} of them waiting for a lock"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "load": [load_before, load_after],
                    "figures": figures,
                    "errors": errors,
                    "audit": events,
                    "waits": waits,
                }
            )
        )


if __name__ == "__main__":
    main()
