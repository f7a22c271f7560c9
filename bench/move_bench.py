#!/usr/bin/env python3
"""Move benchmark: 10,000 checkpoint files moved host -> bucket by the agent and bucket -> bucket by the
runner's server-side copy, each beside the aws CLI on the same data, in the same run, on one endpoint.

- **host -> bucket**: an offload job (``agent_push``, awaiting the agent) of a host copy holding
  ``--files`` files of ``--size`` bytes (plus ``--large`` files of ``--large-size``, uploaded in parts),
  carried out by the real agent (``python -m fleet.agent --offloads --jobs N``) against the real web
  app (gunicorn, PostgreSQL) and moto's S3 server; the clock runs from the agent's start to its exit,
  every file then being counted done by the server (its HEAD of every target checked). The
  verification that follows in a worker (``promotion.moves.copied``) is then run and timed on its own.
  Beside it:
  ``aws s3 cp --recursive ROOT s3://B/ --endpoint-url URL`` of the same directory; and, as a second
  baseline, the requests a verified upload needs at least (a PUT with its sha256, then a HEAD of it) sent
  by boto3 with ``--jobs`` threads: what the endpoint alone makes of them.
- **bucket -> bucket**: a copy job of the offloaded objects to a second bucket, run by
  ``promotion.runner.copy`` (the path a demotion between buckets takes, ``PROMOTION_COPY_CONCURRENCY``
  copies at once); the clock runs from its start
  until every item is recorded done. Beside it: ``aws s3 cp --recursive s3://A/P s3://C/`` and
  ``aws s3 sync s3://A/P s3://D/`` (server-side copies too).

The endpoint is moto's server in its own process; the database a fresh PostgreSQL one (``--db-name``,
dropped and created: give one that is yours). Ratios are ours / the CLI's: under 1.0 we are faster.

    .venv/bin/python bench/move_bench.py --db-name ckptfleet_movebench
    make bench-move BENCH_ARGS="--files 2000"

Figures and how to read them: docs/benchmarks.md ("Moves").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.scan_bench import children_cpu, cpu_seconds, free_port, source_state, venv_python  # noqa: E402

REGION = "us-east-1"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "movebench",
    "AWS_SECRET_ACCESS_KEY": "movebench-secret",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}
PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"
MIB = 1024 * 1024


def say(message: str) -> None:
    print(f"move-bench: {message}", file=sys.stderr, flush=True)


def serve_moto(port: int) -> None:
    """The endpoint process: moto's server on 127.0.0.1:port until SIGTERM."""
    os.environ.update(AWS_ENV)
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    print(json.dumps({"ready": True}), flush=True)
    signal.signal(signal.SIGTERM, lambda *a: (server.stop(), sys.exit(0)))
    while True:
        time.sleep(3600)


class Process:
    def __init__(self, args: list[str], log: Path, env: dict | None = None, ready: str = "") -> None:
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE if ready else log.open("ab"),
            stderr=log.open("ab"),
            env=env,
            cwd=REPO,
            text=bool(ready),
            start_new_session=True,
        )
        if ready and ready not in (self.proc.stdout.readline() if self.proc.stdout else ""):
            raise SystemExit(f"move-bench: {args[0]} did not start: {log.read_text(errors='replace')[-3000:]}")

    def cpu(self) -> float:
        total = cpu_seconds(self.proc.pid)
        for child in _children(self.proc.pid):
            total += cpu_seconds(child)
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def recreate_database(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")


def flush_redis(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def write_files(root: Path, files: int, size: int, large: int, large_size: int) -> list[tuple[str, int]]:
    """``files`` files of ``size`` random bytes in DCP-like folders (100 ranks a step), and ``large`` big ones."""
    out = []
    noise = os.urandom(size + 4096)
    for i in range(files):
        rel = f"llm/llama-70b/step-{i // 100:05d}/__{i % 100}_0.distcp"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        start = i % 4096
        body = i.to_bytes(8, "little") + noise[start + 8 : start + size]
        path.write_bytes(body)
        out.append((rel, len(body)))
    for i in range(large):
        rel = f"llm/llama-70b/step-big/__{i}_0.distcp"
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            left = large_size
            while left:
                block = os.urandom(min(left, 8 * MIB))
                f.write(block)
                left -= len(block)
        out.append((rel, large_size))
    return out


def timed(command: list[str], env: dict, endpoint: Process) -> dict:
    say(f"baseline: {' '.join(command)}")
    cpu0, moto0, load = children_cpu(), endpoint.cpu(), os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"move-bench: {' '.join(command[:3])} failed: {done.stderr[-2000:]}")
    result = {
        "s": seconds,
        "cpu_s": children_cpu() - cpu0,
        "moto_cpu_s": endpoint.cpu() - moto0,
        "load_1min": load,
        "command": " ".join(command),
    }
    say(f"  {seconds:.2f} s (CPU {result['cpu_s']:.1f} s, endpoint CPU {result['moto_cpu_s']:.1f} s, load {load:.1f})")
    return result


def put_then_head(s3c, root: Path, files: list[tuple[str, int]], jobs: int, endpoint: Process) -> dict:
    """The second baseline: the requests a verified upload needs at least, with botocore as the CLI uses it.

    ``jobs`` threads each PUT a file with its sha256 (x-amz-checksum-sha256, which the store keeps) and then
    HEAD it with ChecksumMode (what a verification must ask): two requests a file, no web app, no database.
    """
    import base64
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    say(f"baseline: boto3, {jobs} threads: PUT (with its sha256) then HEAD (ChecksumMode) of each file")

    def one(entry: tuple[str, int]) -> None:
        rel, _size = entry
        body = (root / rel).read_bytes()
        digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
        s3c.put_object(Bucket="floor-target", Key=rel, Body=body, ChecksumSHA256=digest, IfNoneMatch="*")
        s3c.head_object(Bucket="floor-target", Key=rel, ChecksumMode="ENABLED")

    cpu0, moto0, load = time.process_time(), endpoint.cpu(), os.getloadavg()[0]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, files))
    seconds = time.perf_counter() - t0
    result = {
        "s": seconds,
        "cpu_s": time.process_time() - cpu0,
        "moto_cpu_s": endpoint.cpu() - moto0,
        "load_1min": load,
        "requests": 2 * len(files),
    }
    say(f"  {seconds:.2f} s (CPU {result['cpu_s']:.1f} s, endpoint CPU {result['moto_cpu_s']:.1f} s, load {load:.1f})")
    return result


def setup_django(env: dict) -> None:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ckptfleet.settings")
    import django

    django.setup()


def make_offload(endpoint_url: str, root: Path, files: list[tuple[str, int]], bucket_name: str):
    """A host with the files as one checkpoint copy, the target bucket, and an offload job awaiting the agent."""
    from datetime import UTC, datetime

    from django.utils import timezone

    from audit.actor import Actor
    from catalog.choices import CopyState, Verification
    from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
    from fleet.services import host_register, host_token_issue, location_add
    from ingest.scan import bucket_add
    from promotion.choices import Direction, ItemState, JobState, Method
    from promotion.models import PromotionItem, PromotionJob

    actor = Actor.command(label="move-bench")
    host = host_register(name="gpu-bench", site="dc1", region="eu-west", actor=actor)
    location = location_add(
        host=host, name="gpu-bench:nvme0", kind="nvme", tier="nvme", root_path=str(root), actor=actor
    )
    token = host_token_issue(host=host, actor=actor)
    bucket = bucket_add(
        name="offload-target",
        bucket_name=bucket_name,
        prefix="fleet/",
        endpoint_url=endpoint_url,
        region_name=REGION,
        addressing_style="path",
        scan_every_minutes=0,
        actor=actor,
    )
    team, _ = Team.objects.get_or_create(name="llm")
    run, _ = Run.objects.get_or_create(team=team, name="llama-70b")
    checkpoint = Checkpoint.objects.create(run=run, step=1)
    total = sum(size for _, size in files)
    copy = CheckpointCopy.objects.create(
        checkpoint=checkpoint,
        location=location,
        path="llm/llama-70b",
        format="pytorch_dcp",
        state=CopyState.COMPLETE,
        verification=Verification.UNVERIFIED,
        file_count=len(files),
        bytes=total,
    )
    when = datetime(2026, 11, 20, tzinfo=UTC)
    shard_files = ShardFile.objects.bulk_create(
        [
            ShardFile(
                location=location,
                path=rel,
                size=size,
                mtime=when,
                tier="nvme",
                copy=copy,
                first_seen_at=when,
                changed_at=when,
            )
            for rel, size in files
        ],
        batch_size=2000,
    )
    job = PromotionJob.objects.create(
        checkpoint=checkpoint,
        source_copy=copy,
        target_location=bucket.location,
        target_storage_class="STANDARD",
        target_tier="object_standard",
        direction=Direction.OFFLOAD,
        method=Method.AGENT_PUSH,
        state=JobState.AWAITING_AGENT,
        reason="move benchmark",
        requested_label="move-bench",
        requested_at=timezone.now(),
        items_total=len(files),
        bytes_total=total,
    )
    PromotionItem.objects.bulk_create(
        [
            PromotionItem(
                job=job,
                shard_file=sf,
                path=sf.path,
                source_key=f"{root}/{sf.path}",
                target_key=f"{bucket.prefix}{sf.path}",
                size=sf.size,
                state=ItemState.READY,
            )
            for sf in shard_files
        ],
        batch_size=2000,
    )
    return job, token, bucket


def make_copy(job, source_bucket, target_name: str, endpoint_url: str):
    """A copy job (the runner's server-side path) of the offloaded objects to another bucket."""
    from django.utils import timezone

    from audit.actor import Actor
    from catalog.models import CheckpointCopy
    from ingest.scan import bucket_add
    from promotion.choices import ItemState, JobState, Method
    from promotion.models import PromotionItem, PromotionJob

    actor = Actor.command(label="move-bench")
    target = bucket_add(
        name="copy-target",
        bucket_name=target_name,
        prefix="",
        endpoint_url=endpoint_url,
        region_name=REGION,
        addressing_style="path",
        scan_every_minutes=0,
        actor=actor,
    )
    source_copy = CheckpointCopy.objects.create(
        checkpoint=job.checkpoint,
        location=source_bucket.location,
        path="llm/llama-70b",
        format="pytorch_dcp",
        state=job.source_copy.state,
        file_count=job.items_total,
        bytes=job.bytes_total,
    )
    copy_job = PromotionJob.objects.create(
        checkpoint=job.checkpoint,
        source_copy=source_copy,
        target_location=target.location,
        target_storage_class="STANDARD_IA",
        target_tier="object_ia",
        method=Method.COPY,
        state=JobState.COPYING,
        reason="move benchmark",
        requested_label="move-bench",
        requested_at=timezone.now(),
        items_total=job.items_total,
        bytes_total=job.bytes_total,
    )
    PromotionItem.objects.bulk_create(
        [
            PromotionItem(
                job=copy_job,
                path=item.path,
                source_key=item.target_key,
                target_key=item.path,
                size=item.size,
                etag=etag,
                state=ItemState.READY,
            )
            for item, etag in _etags(job, source_bucket)
        ],
        batch_size=2000,
    )
    return copy_job


def _etags(job, bucket):
    """The offloaded objects with their ETags (a copy reads its source conditionally on the frozen ETag)."""
    from fleet import s3

    client = s3.client_for(bucket)
    etags = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket.bucket_name, Prefix=bucket.prefix):
        for obj in page.get("Contents", []):
            etags[obj["Key"]] = obj["ETag"].strip('"')
    return [(item, etags[item.target_key]) for item in job.items.order_by("pk")]


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "serve-moto":
        serve_moto(int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=64 * 1024, help="bytes per small file (default 64 KiB)")
    parser.add_argument("--large", type=int, default=0, help="large files besides (uploaded in parts)")
    parser.add_argument("--large-size", type=int, default=256 * MIB)
    parser.add_argument("--jobs", type=int, default=10, help="the agent's --jobs (the aws CLI uses 10 at once)")
    parser.add_argument("--db-name", default="ckptfleet_movebench", help="a PostgreSQL database, dropped and made")
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/13",
        help="a Redis db of yours (emptied before and after): the web app queues the verification there, "
        "and the bench then runs it itself, timed on its own",
    )
    parser.add_argument("--aws", default=shutil.which("aws") or "", help="the aws CLI (default: aws on PATH)")
    parser.add_argument("--no-b2b", action="store_true", help="host -> bucket only")
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    aws = args.aws
    if not aws:
        from bench.scan_bench import ensure_aws_cli

        aws, _ = ensure_aws_cli()
    aws_version = subprocess.run([aws, "--version"], capture_output=True, text=True, check=False)
    tmp = Path(tempfile.mkdtemp(prefix="move-bench-"))
    say(f"working in {tmp}")
    root = tmp / "nvme0"
    root.mkdir()
    results: dict = {
        "source": source_state(),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "files": args.files,
        "size": args.size,
        "large": args.large,
        "large_size": args.large_size,
        "jobs": args.jobs,
        "aws_cli": (aws_version.stdout or aws_version.stderr).strip(),
    }
    t0 = time.perf_counter()
    files = write_files(root, args.files, args.size, args.large, args.large_size)
    total = sum(size for _, size in files)
    results["bytes"] = total
    say(f"wrote {len(files)} files, {total / MIB:.0f} MiB, in {time.perf_counter() - t0:.1f} s")

    port = free_port()
    endpoint_url = f"http://127.0.0.1:{port}"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CKPTFLEET_"))}
    base_env.update(AWS_ENV)
    base_env["AWS_CONFIG_FILE"] = base_env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp / "no-aws-config")
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        base_env.pop(name, None)
    base_env["NO_PROXY"] = "127.0.0.1,localhost"
    endpoint = Process(
        [venv_python(), str(Path(__file__).resolve()), "serve-moto", "--port", str(port)],
        tmp / "moto.log",
        env=base_env,
        ready="ready",
    )
    server: Process | None = None
    try:
        import boto3
        from botocore.config import Config

        s3c = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            region_name=REGION,
            aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            config=Config(s3={"addressing_style": "path"}),
        )
        for name in ("offload-target", "cli-target", "copy-target", "cli-copy", "cli-sync", "floor-target"):
            s3c.create_bucket(Bucket=name)

        db_url = f"postgres://postgres@127.0.0.1:5432/{args.db_name}"
        app_env = {
            **base_env,
            "DATABASE_URL": db_url,
            "CKPTFLEET_DEBUG": "1",
            "CKPTFLEET_VAR_DIR": str(tmp / "var"),
            "DJANGO_SETTINGS_MODULE": "ckptfleet.settings",
        }
        app_env["REDIS_URL"] = args.redis_url
        flush_redis(args.redis_url)
        recreate_database(args.db_name)
        done = subprocess.run(
            [venv_python(), "manage.py", "migrate", "-v", "0"], cwd=REPO, env=app_env, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"move-bench: migrate failed: {done.stderr[-2000:]}")
        setup_django(app_env)
        job, token, bucket = make_offload(endpoint_url, root, files, "offload-target")

        web_port = free_port()
        server = Process(
            [
                str(REPO / ".venv" / "bin" / "gunicorn"),
                "ckptfleet.wsgi",
                "--bind",
                f"127.0.0.1:{web_port}",
                "--workers",
                "2",
                "--threads",
                "4",
                "--log-level",
                "warning",
            ],
            tmp / "web.log",
            env=app_env,
        )
        server_url = f"http://127.0.0.1:{web_port}"
        for _ in range(100):
            try:
                import urllib.request

                urllib.request.urlopen(f"{server_url}/healthz/", timeout=2).read()
                break
            except OSError:
                time.sleep(0.2)

        # host -> bucket: the agent
        agent_env = {**base_env, "CKPTFLEET_TOKEN": token}
        for name in list(agent_env):
            if name.startswith("AWS_"):
                agent_env.pop(name)  # the host has no S3 credentials
        command = [
            venv_python(),
            "-m",
            "fleet.agent",
            "--server",
            server_url,
            "--host",
            "gpu-bench",
            "--root",
            str(root),
            "--offloads",
            "--jobs",
            str(args.jobs),
        ]
        say(f"ours: {' '.join(command)}")
        cpu0, moto0, web0, load = children_cpu(), endpoint.cpu(), server.cpu(), os.getloadavg()[0]
        t0 = time.perf_counter()
        ran = subprocess.run(command, env=agent_env, cwd=REPO, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - t0
        job.refresh_from_db()
        ours = {
            "s": seconds,
            "agent_cpu_s": children_cpu() - cpu0,
            "web_cpu_s": server.cpu() - web0,
            "moto_cpu_s": endpoint.cpu() - moto0,
            "load_1min": load,
            "exit": ran.returncode,
            "items_done": job.items_done,
            "bytes_done": job.bytes_done,
            "summary": ran.stdout.strip().splitlines()[-1:] or ran.stderr[-500:],
        }
        say(f"  {seconds:.2f} s, exit {ran.returncode}, {job.items_done}/{job.items_total} done; {ours['summary']}")
        if job.items_done != job.items_total:
            say(f"agent stderr: {ran.stderr[-3000:]}")
            raise SystemExit("move-bench: the offload did not finish")
        results["host_to_bucket"] = {
            "ours": ours,
            "aws_cp": timed(
                [
                    aws,
                    "s3",
                    "cp",
                    "--recursive",
                    "--quiet",
                    str(root),
                    "s3://cli-target/",
                    "--endpoint-url",
                    endpoint_url,
                ],
                base_env,
                endpoint,
            ),
        }
        results["host_to_bucket"]["ratio"] = ours["s"] / results["host_to_bucket"]["aws_cp"]["s"]
        results["host_to_bucket"]["put_head"] = put_then_head(s3c, root, files, args.jobs, endpoint)
        say(f"host -> bucket: {results['host_to_bucket']['ratio']:.2f}x the aws CLI")

        # What follows the upload in a worker (queued by the last report): verify every new object.
        from promotion import moves

        say("then: promotion.moves.copied (verification of every new object), in this process")
        moto0, t0 = endpoint.cpu(), time.perf_counter()
        state = moves.copied(job.pk)
        job.refresh_from_db()
        results["host_to_bucket"]["verify"] = {
            "s": time.perf_counter() - t0,
            "moto_cpu_s": endpoint.cpu() - moto0,
            "state": state,
            "verified": job.verified_at is not None,
            "error": job.error,
        }
        say(f"  {results['host_to_bucket']['verify']['s']:.2f} s, {state}, verified: {job.verified_at is not None}")

        if not args.no_b2b:
            from promotion import runner

            runner._rescan = lambda job_id: None  # the scan of the target afterwards is not part of the copy
            copy_job = make_copy(job, bucket, "copy-target", endpoint_url)
            say("ours: promotion.runner.copy (server-side CopyObject, PROMOTION_COPY_CONCURRENCY at once)")
            moto0, load = endpoint.cpu(), os.getloadavg()[0]
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            state = runner.copy(copy_job.pk, claim="move-bench")
            seconds = time.perf_counter() - t0
            copy_job.refresh_from_db()
            b2b = {
                "s": seconds,
                "cpu_s": time.process_time() - cpu0,
                "moto_cpu_s": endpoint.cpu() - moto0,
                "load_1min": load,
                "state": state,
                "items_done": copy_job.items_done,
            }
            say(f"  {seconds:.2f} s, {state}, {copy_job.items_done}/{copy_job.items_total} done")
            source = "s3://offload-target/fleet/"
            results["bucket_to_bucket"] = {
                "ours": b2b,
                "aws_cp": timed(
                    [
                        aws,
                        "s3",
                        "cp",
                        "--recursive",
                        "--quiet",
                        source,
                        "s3://cli-copy/",
                        "--endpoint-url",
                        endpoint_url,
                    ],
                    base_env,
                    endpoint,
                ),
                "aws_sync": timed(
                    [aws, "s3", "sync", "--quiet", source, "s3://cli-sync/", "--endpoint-url", endpoint_url],
                    base_env,
                    endpoint,
                ),
            }
            best = min(results["bucket_to_bucket"]["aws_cp"]["s"], results["bucket_to_bucket"]["aws_sync"]["s"])
            results["bucket_to_bucket"]["ratio"] = b2b["s"] / best
            say(f"bucket -> bucket: {results['bucket_to_bucket']['ratio']:.2f}x the faster aws CLI command")
    finally:
        if server is not None:
            server.stop()
        endpoint.stop()
        flush_redis(args.redis_url)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
