"""The compliance guarantee against the app's own database role (issue 26, item 5).

On main the app's role owned the tables: from ``manage.py shell``, ``SET session_replication_role = replica`` or
``ALTER TABLE ... DISABLE TRIGGER USER`` then an UPDATE released a compliance hold, with no audit event, and
``verify_audit`` said "intact". Now (PostgreSQL) the app connects as a role that ``fleet_db_roles`` made: it owns
nothing, so each of those is refused, while the product still works through it; the guard triggers are ENABLE ALWAYS,
so even the owner's ``replica`` session runs them; and what the owner can still do (disable a trigger, then UPDATE)
is named by ``verify_audit``, on both databases.
"""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from actions import services
from actions.models import Hold, HoldMode
from audit.verify import audit_verify_all
from ckptfleet.dbroles import TEST_FLUSH_TRIGGERS, app_role_problems, grant_statements, guard_triggers
from tests.actions.conftest import as_ui, build_fleet, make_person
from tests.conftest import is_postgres
from tests.reliability.conftest import report

postgres_only = pytest.mark.skipif(not is_postgres(), reason="database roles and triggers' modes are PostgreSQL's")
APP_PASSWORD = "app-role-test-password"


def compliance_hold(fleet, person) -> Hold:
    return services.hold(
        run=fleet.run,
        checkpoint=fleet.checkpoints[200],
        reason="regulator's retention order",
        case_ref="SEC-17a-4",
        mode=HoldMode.COMPLIANCE,
        retain_until=(timezone.now() + timedelta(days=30)).replace(microsecond=0),
        actor=as_ui(person),
    )


@pytest.fixture
def app_role(transactional_db):
    """A login role made by ``fleet_db_roles``'s SQL, committed (another connection must see it), dropped after."""
    name = f"{connection.settings_dict['NAME']}_app"[:63].lower()
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        owner = cursor.fetchone()[0]
        _drop_role(cursor, name)
        for statement in grant_statements(
            app_role=name, owner_role=owner, database=connection.settings_dict["NAME"], password=APP_PASSWORD
        ):
            cursor.execute(statement)
    yield name
    connection.close()
    with connection.cursor() as cursor:
        _drop_role(cursor, name)


def _drop_role(cursor, name: str) -> None:
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name])
    if cursor.fetchone():
        cursor.execute(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}'")
        cursor.execute(f"DROP OWNED BY {name}")
        cursor.execute(f"DROP ROLE {name}")


def connect_as(role: str) -> psycopg.Connection:
    settings = connection.settings_dict
    return psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        dbname=settings["NAME"],
        user=role,
        password=APP_PASSWORD,
        autocommit=True,
    )


ATTACKS = {
    "SET session_replication_role = replica": ("SET session_replication_role = replica", "permission denied"),
    "ALTER TABLE actions_hold DISABLE TRIGGER USER": (
        "ALTER TABLE actions_hold DISABLE TRIGGER USER",
        "must be owner",
    ),
    "ALTER TABLE catalog_auditevent DISABLE TRIGGER ALL": (
        "ALTER TABLE catalog_auditevent DISABLE TRIGGER ALL",
        "must be owner",
    ),
    "release the compliance hold": (
        "UPDATE actions_hold SET released_at = now(), released_label = 'mallory', release_reason = 'gone' "
        "WHERE mode = 'compliance'",
        "cannot be released before its retain-until date",
    ),
    "shorten the compliance hold": (
        "UPDATE actions_hold SET retain_until = now() WHERE mode = 'compliance'",
        "never shortened",
    ),
    "move the compliance hold to another run": (
        "UPDATE actions_hold SET checkpoint_id = NULL WHERE mode = 'compliance'",
        "cannot be changed",
    ),
    "UPDATE an audit event": ("UPDATE catalog_auditevent SET reason = 'nothing to see'", "append-only"),
    "DELETE an audit event": ("DELETE FROM catalog_auditevent", "append-only"),
    "TRUNCATE the audit events": ("TRUNCATE catalog_auditevent", "permission denied"),
    "drop the hold guard": ("DROP TRIGGER actions_hold_compliance_guard ON actions_hold", "must be owner"),
    "make itself a superuser": ("ALTER ROLE {role} SUPERUSER", "must be superuser|permission denied"),
}


@postgres_only
def test_the_app_role_cannot_walk_round_a_compliance_hold_or_the_audit_trail(app_role):
    fleet = build_fleet()
    held = compliance_hold(fleet, make_person("olga", "operator"))
    with connection.cursor() as cursor:
        assert app_role_problems(cursor, app_role) == []
    refused = 0
    with connect_as(app_role) as app:
        for name, (statement, message) in ATTACKS.items():
            with pytest.raises(psycopg.Error, match=message) as caught:
                app.execute(statement.format(role=app_role))
            assert caught.value, name
            refused += 1
        # A replica session would have skipped ordinary triggers: the app cannot open one, and nothing changed.
        assert app.execute("SHOW session_replication_role").fetchone()[0] == "origin"
    held.refresh_from_db()
    assert held.released_at is None and held.checkpoint_id == fleet.checkpoints[200].pk
    assert audit_verify_all(stores=[]).ok
    report("app role: attacks on holds and the audit trail refused", f"{refused} of {len(ATTACKS)}")


@postgres_only
def test_the_product_works_through_the_app_role(app_role):
    """What the app does every day (insert with identity keys, lock rows, update, audit) needs no more rights."""
    fleet = build_fleet()
    olga, oscar = make_person("olga", "operator"), make_person("oscar", "operator")
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(USER=app_role, PASSWORD=APP_PASSWORD)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_user")
            assert cursor.fetchone()[0] == app_role
        legal = services.hold(run=fleet.run, reason="litigation", case_ref="LEG-9", actor=as_ui(olga))
        services.release(hold=legal, reason="case closed", actor=as_ui(oscar))
        assert audit_verify_all(stores=[]).ok
    finally:
        connection.close()
        connection.settings_dict.update(USER=saved["USER"], PASSWORD=saved["PASSWORD"])
    assert Hold.objects.get(pk=legal.pk).released_at is not None


@postgres_only
def test_fleet_db_roles_refuses_to_grant_to_the_owner_itself(transactional_db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        owner = cursor.fetchone()[0]
    with pytest.raises(CommandError, match="both"):
        call_command("fleet_db_roles", "--app-role", owner)


@postgres_only
def test_every_guard_trigger_fires_always_so_a_replica_session_still_runs_it(db):
    """Even the owner's (here: the superuser's) replica session meets the compliance trigger; on main it did not."""
    modes = {f"{table}.{name}": enabled for table, name, enabled in guard_triggers(connection.cursor())}
    not_always = {
        name: mode for name, mode in modes.items() if mode != "A" and name.split(".")[1] not in TEST_FLUSH_TRIGGERS
    }
    assert not_always == {}
    fleet = build_fleet()
    held = compliance_hold(fleet, make_person("olga", "operator"))
    with pytest.raises(Exception, match="cannot be released before"), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "UPDATE actions_hold SET released_at = now(), released_label = 'mallory' WHERE id = %s", [held.pk]
        )
    report("guard triggers ENABLE ALWAYS", f"{sum(mode == 'A' for mode in modes.values())} of {len(modes)}")


def release_behind_the_products_back(hold: Hold) -> None:
    """What the owner can still do: take the guard out of the way, release by SQL, put the guard back."""
    with connection.cursor() as cursor:
        if is_postgres():
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            cursor.execute("ALTER TABLE actions_hold DISABLE TRIGGER actions_hold_compliance_guard")
            cursor.execute(
                "UPDATE actions_hold SET released_at = now(), released_label = 'dba' WHERE id = %s", [hold.pk]
            )
            cursor.execute("ALTER TABLE actions_hold ENABLE ALWAYS TRIGGER actions_hold_compliance_guard")
            return
        cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'actions_hold'")
        triggers = cursor.fetchall()
        for name, _ in triggers:
            cursor.execute(f"DROP TRIGGER {name}")
        cursor.execute(
            "UPDATE actions_hold SET released_at = datetime('now'), released_label = 'dba' WHERE id = %s", [hold.pk]
        )
        for _, sql in triggers:
            cursor.execute(sql)


def test_verify_audit_names_a_hold_the_owner_released_by_raw_sql(db, capsys):
    fleet = build_fleet()
    olga = make_person("olga", "operator")
    held = compliance_hold(fleet, olga)
    services.hold(run=fleet.run, reason="litigation", case_ref="LEG-1", actor=as_ui(olga))
    assert audit_verify_all(stores=[]).ok
    release_behind_the_products_back(held)
    report_ = audit_verify_all(stores=[])
    assert not report_.ok and len(report_.problems) == 1
    assert f"hold {held.pk} (SEC-17a-4" in report_.problems[0] and "no hold.release event" in report_.problems[0]
    with pytest.raises(CommandError, match=f"hold {held.pk} .*released behind the product's back"):
        call_command("verify_audit")
    report("verify_audit: a hold released by the owner's raw SQL", report_.problems[0])


def test_verify_audit_names_a_hold_created_or_changed_without_an_event(db):
    fleet = build_fleet()
    olga = make_person("olga", "operator")
    held = compliance_hold(fleet, olga)
    made = Hold.objects.create(
        run=fleet.run, reason="planted", case_ref="NONE", placed_label="dba", placed_at=timezone.now()
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE actions_hold SET retain_until = retain_until + interval '1 day' WHERE id = %s"
            if is_postgres()
            else "UPDATE actions_hold SET retain_until = datetime(retain_until, '+1 day') WHERE id = %s",
            [held.pk],
        )
    problems = audit_verify_all(stores=[]).problems
    assert any(f"hold {made.pk} (NONE" in p and "no hold.place event" in p for p in problems)
    assert any(f"hold {held.pk} " in p and "changed without an event" in p for p in problems)
