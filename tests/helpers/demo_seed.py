"""The demo fleet for a test: ``manage.py seed_demo`` once per test worker, then a copy of what it made.

Seeding the demo costs five seconds of CPU (real checkpoint trees walked and read by the agent's code, five
inventories ingested, the people, the holds, a month of spend), and about forty tests of each pass of ``make test``
start from it. A transactional test (``live_server``, ``transactional_db``: every browser test) sees a database that
pytest-django empties after each test, so the first such test in a worker seeds for real and keeps a copy of the
result; each later one gets that copy back in a fraction of a second:

- the database, whole: SQLite's backup API into the test database; on PostgreSQL every table copied into a schema
  of its own (``demo_snapshot_N``) and copied back, with the sequences where they were;
- the files: the seeded folder (the hosts' trees, the demo's password, the checksum cache) copied back over the
  folder the database names, which is the same one for every test of the worker, so that a test that deleted or
  changed a file leaves the next one the demo as seeded (``cp --sparse=always``: the big shards are sparse).

The copy is the seed of a few minutes ago. It is used only while the clock reads between the seed and
``REUSE_FOR`` after it, on the same day (UTC and ``TIME_ZONE``): a test that set the clock elsewhere (``--clock``,
time-machine) or ran past midnight gets a fresh seed. A test inside a transaction (``db``) or one that seeds with S3
seeds for real, as before.
"""

from __future__ import annotations

import io
import itertools
import shutil
import sqlite3
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

REUSE_FOR = timedelta(minutes=10)


@dataclass
class _Snapshot:
    seeded_at: datetime
    home: Path
    pristine: Path
    schema: str  # PostgreSQL: the schema that holds the copy
    sqlite: sqlite3.Connection | None = None
    tables: list[str] = field(default_factory=list)  # PostgreSQL: the tables with rows, copied into ``schema``
    sequences: list[tuple[str, int | None]] = field(default_factory=list)  # PostgreSQL: (name, last value)


_SNAPSHOTS: dict[tuple[str, str, str], _Snapshot] = {}
_NUMBERS = itertools.count()  # each copy's own schema and folder


def seed_demo(settings, basetemp: Path, *, variant: str = "") -> Path:
    """Seed the demo (or put back this worker's seed), with ``settings.VAR_DIR`` the demo's folder; its trees' path.

    ``basetemp`` is pytest's base temporary folder of this worker (``tmp_path_factory.getbasetemp()``). A test that
    seeds under other settings than the suite's (a grace period, say) names them in ``variant``: it gets a seed of
    its own.
    """
    key = (connection.vendor, str(connection.settings_dict["NAME"]), variant)
    home = basetemp / f"seeded-demo-{connection.vendor}"
    settings.VAR_DIR = home
    transactional = not connection.in_atomic_block
    snapshot = _SNAPSHOTS.get(key)
    if transactional and snapshot is not None and _still_fresh(snapshot.seeded_at):
        _copy_tree(snapshot.pristine, snapshot.home)
        _restore_database(snapshot)
        return home / "demo"

    from tests.conftest import restore_default_prices

    seeded_at = timezone.now()
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    restore_default_prices()
    call_command("seed_demo", dir=str(home / "demo"), stdout=io.StringIO())
    if transactional:
        if snapshot is not None:  # a stale copy: its folder and schema go, the new seed's take their place
            _forget(snapshot)
        number = next(_NUMBERS)
        pristine = basetemp / f"seeded-demo-{connection.vendor}-{number}.pristine"
        snapshot = _Snapshot(seeded_at, home, pristine, schema=f"demo_snapshot_{number}")
        _copy_tree(home, snapshot.pristine)
        _take_database(snapshot)
        _SNAPSHOTS[key] = snapshot
    return home / "demo"


def _still_fresh(seeded_at: datetime) -> bool:
    now = timezone.now()
    return (
        seeded_at <= now <= seeded_at + REUSE_FOR
        and now.date() == seeded_at.date()
        and timezone.localdate(now) == timezone.localdate(seeded_at)
    )


def _forget(snapshot: _Snapshot) -> None:
    shutil.rmtree(snapshot.pristine, ignore_errors=True)
    if snapshot.sqlite is not None:
        snapshot.sqlite.close()
    else:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP SCHEMA IF EXISTS {snapshot.schema} CASCADE")


def _copy_tree(source: Path, target: Path) -> None:
    """``target`` made a copy of ``source``, times and holes kept: the demo's big shards are sparse files (terabytes
    that take a few kilobytes), which a plain copy would write out in full."""
    shutil.rmtree(target, ignore_errors=True)
    subprocess.run(["cp", "-a", "--sparse=always", str(source), str(target)], check=True)


def _take_database(snapshot: _Snapshot) -> None:
    connection.ensure_connection()
    if connection.vendor == "sqlite":
        snapshot.sqlite = sqlite3.connect(":memory:", check_same_thread=False)
        connection.connection.backup(snapshot.sqlite)
        return
    with connection.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {snapshot.schema} CASCADE")
        cursor.execute(f"CREATE SCHEMA {snapshot.schema}")
        for table in _public_tables(cursor):
            cursor.execute(f'SELECT EXISTS (SELECT 1 FROM public."{table}")')
            if cursor.fetchone()[0]:
                cursor.execute(f'CREATE TABLE {snapshot.schema}."{table}" AS TABLE public."{table}"')
                snapshot.tables.append(table)
        cursor.execute(
            # Not the migrations' own: a test that migrates backwards and forwards between two seeds writes rows
            # there that the copy does not hold, and setting its sequence back made their ids collide.
            "SELECT schemaname || '.' || sequencename, last_value FROM pg_sequences "
            "WHERE schemaname = 'public' AND sequencename <> 'django_migrations_id_seq'"
        )
        snapshot.sequences = list(cursor.fetchall())


def _restore_database(snapshot: _Snapshot) -> None:
    connection.ensure_connection()
    if snapshot.sqlite is not None:
        snapshot.sqlite.backup(connection.connection)
    else:
        with transaction.atomic(), connection.cursor() as cursor:
            # Replica mode skips the foreign keys' checks and the ordinary triggers while the rows go back in any
            # order; the guards that fire ALWAYS (audit, holds, ownership) are switched off for these statements
            # alone and on again before the transaction ends.
            cursor.execute("SET LOCAL session_replication_role = replica")
            cursor.execute(
                "SELECT c.relname, t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND NOT t.tgisinternal AND t.tgenabled = 'A'"
            )
            always = cursor.fetchall()
            for table, trigger in always:
                cursor.execute(f'ALTER TABLE public."{table}" DISABLE TRIGGER "{trigger}"')
            tables = ", ".join(f'public."{table}"' for table in _public_tables(cursor))
            cursor.execute(f"TRUNCATE {tables}")
            for table in snapshot.tables:
                cursor.execute(f'INSERT INTO public."{table}" SELECT * FROM {snapshot.schema}."{table}"')
            for sequence, last_value in snapshot.sequences:
                cursor.execute("SELECT setval(%s, %s, %s)", [sequence, last_value or 1, last_value is not None])
            for table, trigger in always:
                cursor.execute(f'ALTER TABLE public."{table}" ENABLE ALWAYS TRIGGER "{trigger}"')
    # The content types were made again after the last flush, with other ids than the copy's.
    ContentType.objects.clear_cache()


def _public_tables(cursor) -> list[str]:
    cursor.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'django_migrations' "
        "ORDER BY tablename"
    )
    return [row[0] for row in cursor.fetchall()]
