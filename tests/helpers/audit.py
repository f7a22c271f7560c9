"""The audit chain in the tests: change or remove events behind the product's back, as an intruder with SQL would."""

from __future__ import annotations

import importlib

from django.db import connection

from tests.conftest import is_postgres

TABLES = ("catalog_auditevent", "catalog_auditchainhead")


def sqlite_triggers() -> dict[str, str]:
    """The SQLite triggers of audit 0003, by name."""
    return importlib.import_module("audit.migrations.0003_chain_head_trigger").SQLITE_TRIGGERS


def tamper(sql: str, params: list, *, many: bool = False) -> None:
    """Run ``sql`` with the audit tables' triggers out of the way (disabled on PostgreSQL, dropped and put back on
    SQLite), as someone with the database owner's rights would; ``many``: once per row of ``params``."""
    with connection.cursor() as cursor:
        if is_postgres():
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            for table in TABLES:
                cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            (cursor.executemany if many else cursor.execute)(sql, params)
            for table in TABLES:
                cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
            # The test runner's flush needs TRUNCATE (tests/conftest.py); this enabled it with the others.
            cursor.execute("ALTER TABLE catalog_auditevent DISABLE TRIGGER catalog_auditevent_no_truncate")
            cursor.execute("ALTER TABLE catalog_auditchainhead DISABLE TRIGGER audit_chain_head_no_truncate")
            return
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        present = {row[0] for row in cursor.fetchall()}
        dropped = [name for name in sqlite_triggers() if name in present]
        for name in dropped:
            cursor.execute(f"DROP TRIGGER {name}")
        (cursor.executemany if many else cursor.execute)(sql, params)
        for name in dropped:
            cursor.execute(sqlite_triggers()[name])
