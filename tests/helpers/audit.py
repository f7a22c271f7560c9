"""The audit chain in the tests: events as the product writes them (and wrote them before keys), and changed or
removed behind the product's back, as an intruder with SQL would."""

from __future__ import annotations

import importlib

from django.db import connection, transaction
from django.utils import timezone

from audit.models import AuditChainHead, AuditEvent
from audit.services import GENESIS, UNKEYED, audit_record, event_fields, event_hash
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


def record(action: str = "test.action", **kwargs) -> AuditEvent:
    with transaction.atomic():
        return audit_record(
            actor_kind="system",
            actor_label="tests",
            source="command",
            action=action,
            target_type="host",
            target_id=1,
            target_label="gpu-a01",
            **kwargs,
        )


def record_unkeyed(action: str = "legacy.action") -> AuditEvent:
    """An event hashed with plain SHA-256, as every event was before the chain was keyed (audit 0002)."""
    with transaction.atomic():
        head, _ = AuditChainHead.objects.select_for_update().get_or_create(pk=1, defaults={"last_hash": GENESIS})
        event = AuditEvent(
            at=timezone.now(),
            actor_kind="system",
            actor_label="before keys",
            source="command",
            action=action,
            target_type="host",
            prev_hash=head.last_hash,
            alg=UNKEYED,
        )
        event.hash = event_hash(head.last_hash, event_fields(event), UNKEYED)
        event.save(force_insert=True)
        AuditChainHead.objects.filter(pk=1).update(last_hash=event.hash, count=head.count + 1)
        return event
