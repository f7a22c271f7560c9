#!/usr/bin/env python3
"""Spend and overview benchmark: server time of the dashboards on a synthetic fleet of 10,000,000 shard files.

Generates (once) a fleet in PostgreSQL with set-based SQL (``generate_series``): teams, runs (one with
5,000 checkpoints), checkpoints with importance hints, copies on GPU-host NVMe, a parallel file system
and three buckets (one of them in archive classes), their shard files, ``CopyTierUsage`` and ~3 months
of ``UsageDaily`` rollups priced from the default price book, and a few holds. Then it measures the
server time (Django's test client in-process, DEBUG off: middleware, view, queries and templates, no
network) of the spend overview, spend by run, fleet, runs list, a run page (the 5,000-checkpoint run),
the placement page and the run placement API, at 10M and at 100k files, and prints both and the ratio.

    .venv/bin/python bench/spend_bench.py                      # 10M and 100k, generating what is missing
    .venv/bin/python bench/spend_bench.py --sizes 100000       # quick
    .venv/bin/python bench/spend_bench.py --regenerate         # drop and generate again
    .venv/bin/python bench/spend_bench.py --extra-indexes      # also measure with the proposed indexes
    .venv/bin/python bench/spend_bench.py --pages "spend,runs"  # only the pages whose label has one of these
    .venv/bin/python bench/spend_bench.py --shape-of 10000000  # 100k files in the 10M fleet's runs and copies

Databases are named ``ckpt_h4a_spend_<files>`` and kept between runs (generation of 10M rows takes
minutes); a kept database is migrated before measuring (a new rollup is filled from the daily rows);
``--drop`` removes them. Each page's figures carry the 1-minute load average at its end. This is a
benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PG = "postgres://postgres@127.0.0.1:5432/{db}"
DB_PREFIX = "ckpt_h4a_spend_"
FILES_PER_COPY_HINT = 200
HISTORY_DAYS = 92
TEAMS = [
    ("llm", "CC-100"),
    ("multimodal", "CC-100"),
    ("speech", "CC-200"),
    ("vision", "CC-200"),
    ("rl", "CC-300"),
    ("research", "CC-300"),
    ("code", "CC-100"),
    ("safety", "CC-400"),
    ("robotics", "CC-500"),
    ("bio", "CC-500"),
    ("search", ""),
    ("ads", "CC-600"),
]

# Indexes the bench can add to measure their effect (``--extra-indexes``); see docs/benchmarks.md. None is
# pending: the last one measured here (``usage_day``) is in the migrations, now as ``usage_day_tier``.
EXTRA_INDEXES: list[tuple[str, str]] = []


def say(message: str) -> None:
    print(f"[spend-bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def db_name(files: int, shape: int | None = None) -> str:
    return f"{DB_PREFIX}{files}" + (f"_shape{shape}" if shape and shape != files else "")


# --- generation (runs inside Django, on the bench database) ---------------------------------------


def _scale(files: int) -> dict:
    runs = max(20, files // 25_000)
    hosts = max(8, min(64, files // 150_000))
    return {"runs": runs, "hosts": hosts}


def generate_demo() -> None:
    """The demo fleet (``manage.py seed_demo``, without an S3 endpoint), for issue 18's "every page under 300 ms p95
    on the demo fleet"; its files are counted into ``bench_marker``."""
    import tempfile

    from django.core.management import call_command
    from django.db import connection

    t0 = time.perf_counter()
    call_command("migrate", verbosity=0)
    with tempfile.TemporaryDirectory(prefix="spend-bench-demo-") as tree:
        call_command("seed_demo", dir=tree, reset=True, s3_endpoint="", verbosity=0)
    with connection.cursor() as cur:
        cur.execute("CREATE TABLE bench_marker (files bigint, generated_at timestamptz)")
        cur.execute("INSERT INTO bench_marker SELECT count(*), now() FROM catalog_shardfile")
        cur.execute("VACUUM ANALYZE")
    say(f"demo fleet seeded in {time.perf_counter() - t0:.0f} s")


def generate(files: int, shape: int | None = None) -> None:
    """The synthetic fleet, in set-based SQL; small tables through the ORM.

    ``shape``: make the fleet (teams, runs, hosts, checkpoints, copies) of a ``shape``-file fleet and give
    its copies fewer or more files, so that only the number of shard files differs between two sizes.
    """
    shape = shape or files
    from django.core.management import call_command
    from django.db import connection, transaction

    from catalog.models import Run, Team
    from fleet.models import Bucket, Host, StorageLocation

    t0 = time.perf_counter()
    call_command("migrate", verbosity=0)
    say(f"migrated in {time.perf_counter() - t0:.1f} s")
    scale = _scale(shape)
    now = datetime.now(UTC).replace(microsecond=0)
    today = now.date()
    with transaction.atomic():
        teams = [Team.objects.create(name=n, cost_center=cc) for n, cc in TEAMS]
        sites = [("dc1", "eu-west"), ("dc2", "eu-west"), ("dc3", "us-east"), ("dc4", "us-east")]
        hosts = []
        for i in range(scale["hosts"]):
            site, region = sites[i % len(sites)]
            hosts.append(Host.objects.create(name=f"gpu-{site}-{i:03d}", site=site, region=region))
        nvme = [
            StorageLocation.objects.create(
                name=f"{h.name}:/mnt/nvme0/ckpt", kind="nvme", tier="nvme", host=h, root_path="/mnt/nvme0/ckpt"
            )
            for h in hosts
        ]
        gw = Host.objects.create(name="lustre-gw-1", site="dc1", region="eu-west")
        pfs = StorageLocation.objects.create(
            name="lustre-gw-1:/lustre/ckpt", kind="pfs", tier="pfs", host=gw, root_path="/lustre/ckpt"
        )
        buckets = {}
        for key, region in (("eu", "eu-west"), ("us", "us-east"), ("archive", "us-east")):
            loc = StorageLocation.objects.create(
                name=f"s3://ckpt-{key}", kind="bucket", tier="object_standard", region=region
            )
            Bucket.objects.create(location=loc, bucket_name=f"ckpt-{key}", region_name=region)
            buckets[key] = loc
        StorageLocation.objects.update(last_applied_at=now)
        runs = []
        for r in range(scale["runs"]):
            team = teams[r % len(teams)]
            status = "active" if r % 5 in (0, 3) else ("deleted" if r % 37 == 5 else "finished")
            runs.append(Run(team=team, name=f"{team.name}-run-{r:04d}", status=status))
        runs = Run.objects.bulk_create(runs)
    # Checkpoints: the first run has min(5000, total/5) of them, the others share the rest.
    total = max(len(runs) * 4, shape // (2 * FILES_PER_COPY_HINT))
    giant = min(5000, total // 5)
    per_run = max(2, (total - giant) // (len(runs) - 1))
    plan = []
    for i, run in enumerate(runs):
        count = giant if i == 0 else per_run
        # A run lives 60 days; finished ones ended 20-100 days ago, active ones are writing now.
        end = now if run.status == "active" else now - timedelta(days=20 + (i * 7) % 80)
        start = end - timedelta(days=60)
        interval = (end - start) / count
        plan.append((run.pk, count, start, interval, nvme[i % len(nvme)].pk, nvme[(i + 1) % len(nvme)].pk, run.status))
    with connection.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
        cur.execute("SET maintenance_work_mem = '512MB'")
        cur.execute("SET work_mem = '256MB'")
        cur.execute(
            "CREATE TEMP TABLE bench_plan (run_id bigint, n int, start timestamptz, step_interval interval, "
            "host_a bigint, host_b bigint, status text)"
        )
        cur.executemany("INSERT INTO bench_plan VALUES (%s, %s, %s, %s, %s, %s, %s)", plan)
        t = time.perf_counter()
        cur.execute(
            """
            INSERT INTO catalog_checkpoint (run_id, step, tag, importance, first_seen_at)
            SELECT p.run_id, g * 500, '',
                   CASE WHEN mod(g, 100) = 0 THEN 'critical' WHEN mod(g, 20) = 0 THEN 'milestone'
                        WHEN mod(g, 10) = 3 THEN 'transient' ELSE 'routine' END,
                   p.start + p.step_interval * g
            FROM bench_plan p CROSS JOIN LATERAL generate_series(1, p.n) g
            """
        )
        say(f"{cur.rowcount:,} checkpoints in {time.perf_counter() - t:.1f} s")
        # Where copies are: the newest 10 of each run on the run's first host's NVMe (finished runs too:
        # nobody moved them), the newest 3 of active runs also on the second host; everything but the newest
        # 2 of active runs in the EU bucket, except checkpoints of finished runs older than 75 days, which
        # were moved to the archive bucket (GLACIER or DEEP_ARCHIVE); half of the critical and milestone
        # ones replicated to the US bucket; the newest 3 of the llm team's runs on the parallel file system.
        t = time.perf_counter()
        cur.execute(
            """
            CREATE TEMP TABLE bench_ck AS
            SELECT c.id, c.run_id, c.step, c.importance, c.first_seen_at, p.host_a, p.host_b, p.status,
                   row_number() OVER (PARTITION BY c.run_id ORDER BY c.step DESC) AS recency,
                   r.name AS run_name, t.name AS team_name, r.team_id
            FROM catalog_checkpoint c JOIN bench_plan p ON p.run_id = c.run_id
            JOIN catalog_run r ON r.id = c.run_id JOIN catalog_team t ON t.id = r.team_id
            """
        )
        cur.execute(
            f"""
            CREATE TEMP TABLE bench_copy AS
            SELECT id AS checkpoint_id, host_a AS location_id, '' AS storage_class, 'nvme' AS tier, * FROM bench_ck
              WHERE recency <= 10
            UNION ALL
            SELECT id, host_b, '', 'nvme', * FROM bench_ck WHERE recency <= 3 AND status = 'active'
            UNION ALL
            SELECT id, {buckets["eu"].pk}, 'STANDARD', 'object_standard', * FROM bench_ck
              WHERE NOT (status = 'active' AND recency <= 2)
                AND NOT (status <> 'active' AND first_seen_at < now() - interval '75 days')
            UNION ALL
            SELECT id, {buckets["archive"].pk},
                   CASE WHEN mod(step, 1000) = 0 THEN 'DEEP_ARCHIVE' ELSE 'GLACIER' END,
                   CASE WHEN mod(step, 1000) = 0 THEN 'deep_archive' ELSE 'archive' END, * FROM bench_ck
              WHERE status <> 'active' AND first_seen_at < now() - interval '75 days'
            UNION ALL
            SELECT id, {buckets["us"].pk}, 'STANDARD', 'object_standard', * FROM bench_ck
              WHERE importance IN ('critical', 'milestone') AND mod(step, 1000) = 0
                AND first_seen_at >= now() - interval '75 days'
            UNION ALL
            SELECT id, {pfs.pk}, '', 'pfs', * FROM bench_ck WHERE team_name = 'llm' AND recency <= 3
            """
        )
        cur.execute("SELECT count(*) FROM bench_copy")
        copies = cur.fetchone()[0]
        fpc = max(1, files // copies)
        extra = files - fpc * copies  # the first `extra` copies get one more file
        cur.execute(
            """
            CREATE TEMP TABLE bench_copy2 AS
            SELECT b.*, row_number() OVER (ORDER BY b.checkpoint_id, b.location_id) AS n,
                   (256 + mod(b.run_id * 7919, 3800)) * 1048576::bigint AS shard_size,
                   b.team_name || '/' || b.run_name || '/step-' || b.step AS path
            FROM bench_copy b
            """
        )
        cur.execute(
            f"""
            INSERT INTO catalog_checkpointcopy (checkpoint_id, location_id, path, format, state, reasons, temporary,
                verification, verification_reasons, reference_checksums, file_count, bytes, expected_files,
                expected_bytes, newest_mtime, first_seen_at, judged_at, gone_at, verification_basis, verified_at,
                content_print)
            SELECT checkpoint_id, location_id, path, 'pytorch_dcp',
                   CASE WHEN mod(n, 97) = 0 THEN 'partial' WHEN mod(n, 499) = 0 THEN 'corrupt' ELSE 'complete' END,
                   CASE WHEN mod(n, 97) = 0 THEN '["__5_0.distcp is missing"]'::jsonb
                        WHEN mod(n, 499) = 0 THEN '["__1_0.distcp: sizes disagree"]'::jsonb ELSE '[]'::jsonb END,
                   false,
                   CASE WHEN mod(n, 499) = 0 THEN 'mismatch'
                        WHEN mod(n, 97) = 0 THEN 'unverified'
                        WHEN tier = 'nvme' AND mod(n, 3) <> 0 THEN 'unverified'
                        WHEN mod(n, 11) = 0 THEN 'unverified' ELSE 'verified' END,
                   '[]'::jsonb, '{{}}'::jsonb,
                   {fpc} + (CASE WHEN n <= {extra} THEN 1 ELSE 0 END),
                   ({fpc} + (CASE WHEN n <= {extra} THEN 1 ELSE 0 END)) * shard_size,
                   {fpc} + (CASE WHEN n <= {extra} THEN 1 ELSE 0 END) + (CASE WHEN mod(n, 97) = 0 THEN 1 ELSE 0 END),
                   ({fpc} + (CASE WHEN n <= {extra} THEN 1 ELSE 0 END) + (CASE WHEN mod(n, 97) = 0 THEN 1 ELSE 0 END))
                     * shard_size,
                   first_seen_at, first_seen_at, first_seen_at + interval '1 hour', NULL,
                   CASE WHEN mod(n, 499) = 0 THEN 'peers'
                        WHEN mod(n, 97) = 0 OR (tier = 'nvme' AND mod(n, 3) <> 0) OR mod(n, 11) = 0 THEN ''
                        ELSE 'peers' END,
                   CASE WHEN mod(n, 499) <> 0 AND mod(n, 97) <> 0 AND NOT (tier = 'nvme' AND mod(n, 3) <> 0)
                             AND mod(n, 11) <> 0 THEN first_seen_at + interval '1 hour' END,
                   ''
            FROM bench_copy2
            """
        )
        say(f"{cur.rowcount:,} copies ({fpc} or {fpc + 1} files each) in {time.perf_counter() - t:.1f} s")
        cur.execute("ANALYZE catalog_checkpointcopy")
        # Shard files: torchtitan's layout (``pytorch_dcp``), ``__<rank>_0.distcp`` and a ``.metadata`` in each
        # step-N folder, so that the resume pointer's rule (``catalog.pointers``) and the layout read
        # (``catalog.reshard``) do on the bench what they do on a real fleet. FK checks off for this session (the
        # rows are made from existing copies).
        t = time.perf_counter()
        cur.execute("SET session_replication_role = replica")
        cur.execute(
            """
            SELECT indexname, indexdef FROM pg_indexes
            WHERE tablename = 'catalog_shardfile' AND indexname NOT LIKE '%pkey'
              AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE contype = 'u')
            """
        )
        plain_indexes = cur.fetchall()
        cur.execute(
            """
            SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
            WHERE conrelid = 'catalog_shardfile'::regclass AND contype = 'u'
            """
        )
        uniques = cur.fetchall()
        for name, _ in plain_indexes:
            cur.execute(f'DROP INDEX "{name}"')
        for name, _ in uniques:
            cur.execute(f'ALTER TABLE catalog_shardfile DROP CONSTRAINT "{name}"')
        cur.execute(
            """
            INSERT INTO catalog_shardfile (location_id, path, size, mtime, checksum, checksum_algo, facts,
                storage_class, tier, etag, version_id, legal_hold, retain_until, copy_id, first_seen_at,
                changed_at, last_seen_at, gone_at, changed_by_id)
            SELECT c.location_id,
                   c.path || CASE WHEN g = c.file_count - 1 THEN '/.metadata' ELSE '/__' || g || '_0.distcp' END,
                   c.bytes / c.file_count, c.newest_mtime,
                   '', '', NULL, CASE WHEN l.kind = 'bucket' THEN u.storage_class ELSE '' END, '', '', '', NULL,
                   NULL, c.id, c.first_seen_at, c.first_seen_at, NULL, NULL, NULL
            FROM catalog_checkpointcopy c
            JOIN fleet_storagelocation l ON l.id = c.location_id
            JOIN bench_copy2 u ON u.checkpoint_id = c.checkpoint_id AND u.location_id = c.location_id
            CROSS JOIN LATERAL generate_series(0, c.file_count - 1) g
            """
        )
        say(f"{cur.rowcount:,} shard files inserted in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        for name, definition in uniques:
            cur.execute(f'ALTER TABLE catalog_shardfile ADD CONSTRAINT "{name}" {definition}')
        for _, definition in plain_indexes:
            cur.execute(definition)
        cur.execute("SET session_replication_role = origin")
        say(f"shard-file indexes rebuilt in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        cur.execute(
            """
            INSERT INTO catalog_copytierusage (copy_id, location_id, tier, storage_class, bytes, files)
            SELECT c.id, c.location_id, u.tier, u.storage_class, c.bytes, c.file_count
            FROM catalog_checkpointcopy c
            JOIN bench_copy2 u ON u.checkpoint_id = c.checkpoint_id AND u.location_id = c.location_id
            """
        )
        say(f"{cur.rowcount:,} copy tier rows in {time.perf_counter() - t:.1f} s")
        # Daily rollups: each day, every copy whose checkpoint existed by then, grouped as the refresh does,
        # priced at the default price book's tier price / the days of that month.
        t = time.perf_counter()
        cur.execute(
            "SELECT DISTINCT ON (tier) tier, price_per_gib_month FROM fleet_pricepoint "
            "WHERE location_id IS NULL AND host_id IS NULL AND storage_class = '' ORDER BY tier, effective_from DESC"
        )
        prices = dict(cur.fetchall())
        case = " ".join(f"WHEN '{tier}' THEN {price}" for tier, price in prices.items())
        first_day = today - timedelta(days=HISTORY_DAYS - 1)
        month_days = "EXTRACT(DAY FROM (date_trunc('month', d.day) + interval '1 month' - interval '1 day'))::numeric"
        cur.execute(
            f"""
            INSERT INTO catalog_usagedaily (day, location_id, team_id, run_id, run_status, tier, storage_class,
                state, bytes, files, cost_nanos, carried)
            SELECT d.day, c.location_id, u.team_id, u.run_id, u.status, u.tier, u.storage_class, c.state,
                   sum(c.bytes), sum(c.file_count),
                   ROUND(sum(c.bytes) * (CASE u.tier {case} END) * 1000000000 / 1073741824 / {month_days}),
                   d.day <> %s
            FROM generate_series(%s::date, %s::date, interval '1 day') AS d(day)
            JOIN catalog_checkpointcopy c ON c.first_seen_at::date <= d.day
            JOIN bench_copy2 u ON u.checkpoint_id = c.checkpoint_id AND u.location_id = c.location_id
            GROUP BY d.day, c.location_id, u.team_id, u.run_id, u.status, u.tier, u.storage_class, c.state
            """,
            [today, first_day, today],
        )
        usage_rows = cur.rowcount
        cur.execute(
            f"""
            INSERT INTO catalog_usagedaily (day, location_id, team_id, run_id, run_status, tier, storage_class,
                state, bytes, files, cost_nanos, carried)
            SELECT d.day, l.id, NULL, NULL, '', l.tier, '', 'unclaimed', 1073741824 * (1 + mod(l.id, 50)),
                   10 + mod(l.id, 7), ROUND(1073741824 * (1 + mod(l.id, 50)) * (CASE l.tier {case} END) * 1000000000
                   / 1073741824 / {month_days}), false
            FROM generate_series(%s::date, %s::date, interval '1 day') AS d(day) CROSS JOIN fleet_storagelocation l
            """,
            [first_day, today],
        )
        usage_rows += cur.rowcount
        cur.execute(
            "INSERT INTO catalog_usagecursor (location_id, day, refreshed_day, refreshed_at) "
            "SELECT id, %s, %s, %s FROM fleet_storagelocation",
            [today, today, now],
        )
        say(f"{usage_rows:,} daily usage rows over {HISTORY_DAYS} days in {time.perf_counter() - t:.1f} s")
        t = time.perf_counter()
        from spend.usage import usage_monthly_rebuild

        say(f"{usage_monthly_rebuild():,} monthly usage rows in {time.perf_counter() - t:.1f} s")
        cur.execute("CREATE TABLE bench_marker (files bigint, generated_at timestamptz)")
        cur.execute("INSERT INTO bench_marker VALUES (%s, now())", [files])
    # Holds: a few critical checkpoints and one whole finished run, as an incident or a legal case leaves them.
    from actions.models import Hold
    from catalog.models import Checkpoint

    held = Checkpoint.objects.filter(importance="critical").order_by("pk")[:5]
    holds = [
        Hold(
            run_id=c.run_id,
            checkpoint=c,
            reason="incident review",
            case_ref=f"INC-{c.pk}",
            placed_label="bench",
            placed_at=now,
        )
        for c in held
    ]
    finished = Run.objects.filter(status="finished").order_by("pk").first()
    holds.append(Hold(run=finished, reason="litigation hold", case_ref="LEGAL-1", placed_label="bench", placed_at=now))
    Hold.objects.bulk_create(holds)
    t = time.perf_counter()
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    say(f"vacuum analyze in {time.perf_counter() - t:.1f} s; generated in {time.perf_counter() - t0:.0f} s")


# --- measurement (runs inside Django, on the bench database) --------------------------------------

PAGES = [
    ("overview", "/"),
    ("spend overview", "/spend/"),
    ("spend overview, last month", "/spend/?month={last_month}"),
    ("spend by run", "/spend/runs/"),
    ("fleet", "/fleet/"),
    ("runs list", "/runs/"),
    ("runs list by bytes", "/runs/?sort=bytes"),
    ("run page (largest run)", "/runs/{giant}/"),
    ("placement page", "/placement/"),
    ("run placement API", "/api/v1/runs/{giant}/placement/"),
    ("checkpoint page", "/checkpoints/{checkpoint}/"),
    # Issue 17: the resume answer, the ladder and the recovery page under 100 ms p95; issue 18: every page under
    # 300 ms p95. The largest run (5,000 checkpoints) and a typical one (~60).
    ("recovery page (largest run)", "/recovery/{giant}/"),
    ("recovery page (typical run)", "/recovery/{typical}/"),
    ("recovery API (largest run)", "/api/v1/recovery/{giant}/"),
    ("resume answer (largest run)", "/api/v1/runs/{giant}/resume/"),
    ("resume answer (typical run)", "/api/v1/runs/{typical}/resume/"),
    ("ladder (largest run)", "/api/v1/runs/{giant}/ladder/"),
    ("ladder (typical run)", "/api/v1/runs/{typical}/ladder/"),
    ("recovery points", "/recovery/points/"),
    ("approvals inbox", "/approvals/"),
    ("jobs page", "/jobs/"),
    ("audit page", "/audit/"),
    ("deletion list", "/actions/deletions/"),
]


def _backend_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of one PostgreSQL backend, from /proc (same machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(requests: int, extra_indexes: bool, jit: bool, only: str = "") -> dict:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import override_settings

    from catalog.models import Checkpoint, Run

    # A kept database is brought up to the code's migrations (a new rollup is filled from the daily rows).
    call_command("migrate", verbosity=0)
    # ... and a fleet generated before the copies had a real format name ('dcp') gets the one the generator now
    # writes, with each copy's last shard renamed to the .metadata torchtitan's rule looks for.
    with connection.cursor() as cur:
        cur.execute("SELECT 1 FROM catalog_checkpointcopy WHERE format = 'dcp' LIMIT 1")
        if cur.fetchone():
            t = time.perf_counter()
            cur.execute(
                "UPDATE catalog_shardfile s SET path = c.path || '/.metadata' FROM catalog_checkpointcopy c "
                "WHERE s.copy_id = c.id AND c.format = 'dcp' "
                "AND s.path = c.path || '/__' || (c.file_count - 1) || '_0.distcp'"
            )
            renamed = cur.rowcount
            cur.execute("UPDATE catalog_checkpointcopy SET format = 'pytorch_dcp' WHERE format = 'dcp'")
            cur.execute("ANALYZE catalog_shardfile")
            say(f"copies made pytorch_dcp, {renamed:,} .metadata files named in {time.perf_counter() - t:.1f} s")
    if extra_indexes:
        with connection.cursor() as cur:
            for name, ddl in EXTRA_INDEXES:
                t = time.perf_counter()
                cur.execute(ddl)
                say(f"index {name} in {time.perf_counter() - t:.1f} s")
            cur.execute("ANALYZE")
    User = get_user_model()
    user, _ = User.objects.get_or_create(username="bench-admin", defaults={"is_staff": True, "is_superuser": True})
    from django.db.models import Count

    # The largest run (the generator's first, 5,000 checkpoints at 10M files), and a typical one: an active run of
    # the ordinary size (the generator makes runs 0, 3, 5, 8, ... active; the demo fleet has its own).
    giant = Run.objects.annotate(n=Count("checkpoints")).order_by("-n", "pk").first()
    typical = Run.objects.filter(status="active").exclude(pk=giant.pk).order_by("pk").first() or giant
    checkpoint = Checkpoint.objects.filter(run=giant).order_by("-step").first()
    with connection.cursor() as cur:
        cur.execute("SELECT files FROM bench_marker")
        files = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM catalog_shardfile")
        counted = cur.fetchone()[0]
    say(
        f"{counted:,} shard files; largest run {giant} has "
        f"{Checkpoint.objects.filter(run=giant).count():,} checkpoints; jit {'on' if jit else 'off'}"
    )
    client = Client()
    client.force_login(user)
    # As ckptfleet/wsgi.py does in a web process: what was loaded at start goes out of the collector's way.
    from ckptfleet.heap import settle

    settle()
    results = {"files": files, "shard_rows": counted, "jit": jit, "pages": {}}
    queries: list[str] = []

    def count(execute, sql, params, many, context):
        queries.append(sql)
        return execute(sql, params, many, context)

    # The connection stays open between requests (CONN_MAX_AGE), so the backend and its session's JIT
    # setting stay the same; they are read again after the warm-ups in case it was reopened.
    static = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    storages = {"staticfiles": static, "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"}}
    today = datetime.now(UTC).date()
    last_month = (today.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    with override_settings(STORAGES=storages):
        for label, pattern in PAGES:
            if only and not any(part.strip() and part.strip() in label for part in only.split(",")):
                continue
            url = pattern.format(giant=giant.pk, typical=typical.pk, checkpoint=checkpoint.pk, last_month=last_month)
            for _ in range(3):
                response = client.get(url)
                if response.status_code != 200:
                    raise SystemExit(f"{url} answered {response.status_code}")
                with connection.cursor() as cur:
                    cur.execute(f"SET jit = {'on' if jit else 'off'}")
                    cur.execute("SELECT pg_backend_pid()")
                    backend = cur.fetchone()[0]
            queries.clear()
            with connection.execute_wrapper(count):
                client.get(url)
            query_count = len(queries)
            times = []
            cpu0, db0 = time.process_time(), _backend_cpu_s(backend)
            for _ in range(requests):
                t = time.perf_counter()
                response = client.get(url)
                times.append((time.perf_counter() - t) * 1000)
            cpu = (time.process_time() - cpu0) * 1000 / requests
            db_cpu = (_backend_cpu_s(backend) - db0) * 1000 / requests
            times.sort()
            p95 = times[max(0, math.ceil(0.95 * len(times)) - 1)]
            results["pages"][label] = {
                "url": url,
                "p50_ms": round(statistics.median(times), 1),
                "p95_ms": round(p95, 1),
                "queries": query_count,
                "python_cpu_ms": round(cpu, 1),
                "db_cpu_ms": round(db_cpu, 1),
                "bytes": len(response.content),
                "load": round(os.getloadavg()[0], 2),
            }
            say(
                f"{label}: p50 {statistics.median(times):.1f} ms, p95 {p95:.1f} ms, {query_count} queries, "
                f"CPU {cpu:.0f} ms web + {db_cpu:.0f} ms database per request, load {os.getloadavg()[0]:.2f}"
            )
    if extra_indexes:
        with connection.cursor() as cur:
            for name, _ in EXTRA_INDEXES:
                cur.execute(f"DROP INDEX IF EXISTS {name}")
    return results


def child(args) -> None:
    os.environ["DATABASE_URL"] = PG.format(db=args.db)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ckptfleet.settings")
    os.environ["CKPTFLEET_DEBUG"] = "0"
    os.environ["CKPTFLEET_PLAIN_HTTP"] = "1"  # the test client asks over plain HTTP: no redirect to HTTPS
    os.environ.setdefault("DJANGO_SECRET_KEY", "spend-bench-throwaway-key-not-a-secret-0123456789")
    # DEBUG is off, so the audit chain needs a key: a throwaway one, as the secret key is.
    os.environ.setdefault("CKPTFLEET_AUDIT_KEY", "spend-bench-throwaway-audit-key-not-a-secret-0123456789")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()
    if args.child == "generate" and args.demo:
        generate_demo()
    elif args.child == "generate":
        generate(args.files, args.shape)
    else:
        out = measure(args.requests, args.extra_indexes, args.jit, args.pages)
        Path(args.json_out).write_text(json.dumps(out))


# --- orchestration --------------------------------------------------------------------------------


def _psql(sql: str) -> str:
    import psycopg

    with psycopg.connect(PG.format(db="postgres"), autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
        return row[0] if row else None


def _exists(db: str) -> bool:
    import psycopg

    if not _psql(f"SELECT 1 FROM pg_database WHERE datname = '{db}'"):
        return False
    with psycopg.connect(PG.format(db=db)) as conn:
        return bool(conn.execute("SELECT 1 FROM pg_tables WHERE tablename = 'bench_marker'").fetchone())


def _run_child(*extra: str) -> None:
    subprocess.run([sys.executable, __file__, *extra], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000000,100000", help="shard files per fleet, comma-separated")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per page")
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument("--drop", action="store_true", help="drop the bench databases and stop")
    parser.add_argument("--generate-only", action="store_true")
    parser.add_argument("--extra-indexes", action="store_true", help="create EXTRA_INDEXES before measuring")
    parser.add_argument(
        "--jit",
        action="store_true",
        help="measure with PostgreSQL's JIT on (the server's default; the app turns it off for its connections)",
    )
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--pages", default="", help="only pages whose label contains one of these (comma-separated)")
    parser.add_argument(
        "--shape-of",
        type=int,
        metavar="FILES",
        help="give every size the fleet of a FILES-file fleet (runs, hosts, checkpoints, copies), so that only "
        "the shard files per copy differ; its own databases (..._shapeFILES)",
    )
    parser.add_argument(
        "--demo",
        action="store_true",
        help="measure the demo fleet (manage.py seed_demo, database ckpt_h4a_spend_demo) instead of --sizes",
    )
    parser.add_argument("--shape", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child", choices=["generate", "measure"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--files", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()] if not args.demo else [0]

    def fleet_db(files: int, shape: int | None = None) -> str:
        return f"{DB_PREFIX}demo" if args.demo else db_name(files, shape)

    import psycopg

    if args.drop:
        for files in sizes:
            with psycopg.connect(PG.format(db="postgres"), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{fleet_db(files, args.shape_of)}" WITH (FORCE)')
        return
    results = {}
    load = os.getloadavg()
    for files in sizes:
        db = fleet_db(files, args.shape_of)
        if args.regenerate or not _exists(db):
            with psycopg.connect(PG.format(db="postgres"), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
                conn.execute(f'CREATE DATABASE "{db}"')
            say(f"generating {files:,} files into {db}")
            shape = ["--shape", str(args.shape_of)] if args.shape_of else []
            demo = ["--demo"] if args.demo else []
            _run_child("--child", "generate", "--db", db, "--files", str(files), *shape, *demo)
    if args.generate_only:
        return
    for files in sizes:
        db = fleet_db(files, args.shape_of)
        out = f"/tmp/{db}.json"
        extra = ["--extra-indexes"] if args.extra_indexes else []
        extra += ["--jit"] if args.jit else []
        extra += ["--pages", args.pages] if args.pages else []
        _run_child("--child", "measure", "--db", db, "--json-out", out, "--requests", str(args.requests), *extra)
        results[files] = json.loads(Path(out).read_text())
    load_after = os.getloadavg()
    print(
        f"\nServer time per page ({args.requests} requests each, after 3 warm-ups; in-process test client, "
        f"DEBUG off, PostgreSQL JIT {'on' if args.jit else 'off, as the app sets it'}). Load average before "
        f"{load[0]:.1f}, after {load_after[0]:.1f}; {os.cpu_count()} CPUs. CPU = web process + database backend "
        "per request (parallel query workers not included).\n"
    )
    big, small = (max(sizes), min(sizes)) if len(sizes) > 1 else (sizes[0], None)
    fleet = "demo fleet" if args.demo else f"{big:,} files"
    head = f"| page | {fleet} p50 / p95 (ms) | CPU (ms) | queries | load |"
    line = "|---|---|---|---|---|"
    if small:
        head += f" {small:,} files p50 / p95 (ms) | CPU (ms) | queries | load | p95 ratio | CPU ratio |"
        line += "---|---|---|---|---|---|"
    print(head)
    print(line)

    def cpu(page: dict) -> float:
        return page["python_cpu_ms"] + page["db_cpu_ms"]

    for label, _ in PAGES:
        if label not in results[big]["pages"]:
            continue
        b = results[big]["pages"][label]
        row = f"| {label} | {b['p50_ms']} / {b['p95_ms']} | {cpu(b):.0f} | {b['queries']} | {b['load']:.1f} |"
        if small:
            s = results[small]["pages"][label]
            row += (
                f" {s['p50_ms']} / {s['p95_ms']} | {cpu(s):.0f} | {s['queries']} | {s['load']:.1f} |"
                f" {b['p95_ms'] / max(s['p95_ms'], 0.1):.2f}x | {cpu(b) / max(cpu(s), 1):.2f}x |"
            )
        print(row)
    if args.json:
        Path(args.json).write_text(json.dumps({"load": [load, load_after], "results": results}, indent=2))


if __name__ == "__main__":
    main()
