"""The database refuses to move the chain head anywhere but one event forward, on PostgreSQL and on SQLite alike:
a rewind, an overwrite, a jump, a DELETE (and on PostgreSQL a TRUNCATE) by direct SQL all fail."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, transaction

from audit.models import AuditChainHead
from tests.conftest import is_postgres
from tests.helpers.audit import record, sqlite_triggers


def _head() -> tuple[int, str]:
    head = AuditChainHead.objects.get(pk=1)
    return head.count, head.last_hash


def _with_every_trigger(cursor) -> None:
    """Put back the triggers the test runner's flush needs gone (tests/conftest.py), inside this test's transaction."""
    if is_postgres():
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE catalog_auditchainhead ENABLE TRIGGER audit_chain_head_no_truncate")
        cursor.execute("ALTER TABLE catalog_auditevent ENABLE TRIGGER catalog_auditevent_no_truncate")
    else:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        present = {row[0] for row in cursor.fetchall()}
        for name, statement in sqlite_triggers().items():
            if name not in present:
                cursor.execute(statement)


@pytest.fixture
def chain(db):
    events = [record(f"a.{i}") for i in range(3)]
    with connection.cursor() as cursor:
        _with_every_trigger(cursor)
    return events


HEAD = "UPDATE catalog_auditchainhead SET"
STATEMENTS = {
    "rewind to an older event": "UPDATE catalog_auditchainhead SET count = count - 1, last_hash = %(older)s",
    "overwrite the hash": "UPDATE catalog_auditchainhead SET last_hash = %(forged)s",
    "overwrite the hash and step forward": f"{HEAD} count = count + 1, last_hash = %(forged)s",
    "step to an event that does not follow": f"{HEAD} count = count + 1, last_hash = %(older)s",
    "jump two": "UPDATE catalog_auditchainhead SET count = count + 2",
    "lower the count": "UPDATE catalog_auditchainhead SET count = 0",
    "delete it": "DELETE FROM catalog_auditchainhead",
    "start a second head": "INSERT INTO catalog_auditchainhead (id, count, last_hash) VALUES (2, 7, %(forged)s)",
}


@pytest.mark.parametrize("statement", STATEMENTS.values(), ids=STATEMENTS.keys())
def test_direct_sql_cannot_move_the_head_but_forward(chain, statement):
    before = _head()
    params = {"older": chain[0].hash, "forged": "f" * 64}
    with pytest.raises(DatabaseError, match="only moves forward"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement, params)
    assert _head() == before == (3, chain[-1].hash)
    assert AuditChainHead.objects.count() == 1


def test_postgres_refuses_truncating_the_head(chain):
    if not is_postgres():
        pytest.skip("TRUNCATE is PostgreSQL's; SQLite has only DELETE, refused above")
    with pytest.raises(DatabaseError, match="only moves forward"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("TRUNCATE catalog_auditchainhead")
    assert _head() == (3, chain[-1].hash)


def test_the_product_still_moves_it_one_event_at_a_time(chain):
    event = record("a.next")
    assert _head() == (4, event.hash)


@pytest.mark.parametrize(
    "statement",
    ["UPDATE catalog_auditevent SET reason = 'x'", "DELETE FROM catalog_auditevent"],
    ids=["update", "delete"],
)
def test_sqlite_refuses_changing_events_too(chain, statement):
    """PostgreSQL has refused this since catalog 0003 (tests/catalog/test_audit.py); SQLite now does as well."""
    if is_postgres():
        pytest.skip("tests/catalog/test_audit.py covers PostgreSQL's events trigger")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)


def test_sqlite_has_every_audit_trigger_after_migrating(db):
    """SQLite drops a table's triggers when a migration copies the table: this notices a migration that did."""
    if is_postgres():
        pytest.skip("SQLite's triggers")
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        present = {row[0] for row in cursor.fetchall()}
    # The two delete triggers are taken away for the runner's flush (tests/conftest.py), the others stay.
    from tests.conftest import FLUSH_BLOCKING_SQLITE_TRIGGERS

    assert set(sqlite_triggers()) - set(FLUSH_BLOCKING_SQLITE_TRIGGERS) <= present
