"""The compliance-hold rules kept by the database itself: what no service, admin, shell or raw SQL may do.

A compliance hold (``HoldMode.COMPLIANCE``) promises that nobody releases it before its retain-until date
and nobody shortens that date, superusers included. ``actions.services`` refuses that with a clear
message; these triggers refuse it again for every path that bypasses the services (the Django admin, a
``manage.py shell``, an ORM ``update()``, SQL typed into ``psql`` or ``sqlite3``), as the audit table's
append-only trigger does (catalog migration 0003). Refused, on PostgreSQL and SQLite alike:

- UPDATE that releases a compliance hold before ``retain_until`` (by the database's own clock);
- UPDATE that shortens or clears ``retain_until``, changes the mode away from compliance, or moves the
  hold to another run or checkpoint (which would release what it covered);
- DELETE of a compliance hold, released or not (holds are history); on PostgreSQL also TRUNCATE of the
  table while it has one.

Only someone who may ALTER the table (drop or disable the trigger) gets past this; that is the database
owner, outside the product, and the audit chain's anchors are what catch such an intruder.
"""

from __future__ import annotations

PG_INSTALL = [
    """
    CREATE OR REPLACE FUNCTION actions_hold_compliance_guard() RETURNS trigger AS $$
    BEGIN
        IF TG_OP = 'DELETE' THEN
            IF OLD.mode = 'compliance' THEN
                RAISE EXCEPTION 'hold %%: a compliance hold is never deleted', OLD.id
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN OLD;
        END IF;
        IF OLD.mode = 'compliance' THEN
            IF NEW.mode IS DISTINCT FROM 'compliance' THEN
                RAISE EXCEPTION 'hold %%: the mode of a compliance hold cannot be changed', OLD.id
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF NEW.retain_until IS NULL OR NEW.retain_until < OLD.retain_until THEN
                RAISE EXCEPTION 'hold %%: the retain-until date of a compliance hold can be extended, never shortened',
                    OLD.id USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF NEW.run_id <> OLD.run_id OR NEW.checkpoint_id IS DISTINCT FROM OLD.checkpoint_id THEN
                RAISE EXCEPTION 'hold %%: what a compliance hold covers cannot be changed', OLD.id
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            IF OLD.released_at IS NULL AND NEW.released_at IS NOT NULL AND clock_timestamp() < NEW.retain_until THEN
                RAISE EXCEPTION 'hold %%: a compliance hold cannot be released before its retain-until date (%%)',
                    OLD.id, NEW.retain_until USING ERRCODE = 'insufficient_privilege';
            END IF;
        END IF;
        RETURN NEW;
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER actions_hold_compliance_guard
        BEFORE UPDATE OR DELETE ON actions_hold
        FOR EACH ROW EXECUTE FUNCTION actions_hold_compliance_guard()
    """,
    """
    CREATE OR REPLACE FUNCTION actions_hold_no_truncate() RETURNS trigger AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM actions_hold WHERE mode = 'compliance') THEN
            RAISE EXCEPTION 'actions_hold holds compliance holds, which are never deleted (TRUNCATE refused)'
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER actions_hold_no_truncate
        BEFORE TRUNCATE ON actions_hold
        FOR EACH STATEMENT EXECUTE FUNCTION actions_hold_no_truncate()
    """,
]
PG_REMOVE = [
    "DROP TRIGGER IF EXISTS actions_hold_no_truncate ON actions_hold",
    "DROP FUNCTION IF EXISTS actions_hold_no_truncate()",
    "DROP TRIGGER IF EXISTS actions_hold_compliance_guard ON actions_hold",
    "DROP FUNCTION IF EXISTS actions_hold_compliance_guard()",
]

# SQLite stores Django's datetimes as UTC text ("2026-11-27 09:30:00.123456"); julianday() reads that form.
_SQLITE_RULES = {
    "actions_hold_compliance_no_delete": (
        "BEFORE DELETE",
        "OLD.mode = 'compliance'",
        "a compliance hold is never deleted",
    ),
    "actions_hold_compliance_mode": (
        "BEFORE UPDATE",
        "OLD.mode = 'compliance' AND NEW.mode IS NOT 'compliance'",
        "the mode of a compliance hold cannot be changed",
    ),
    "actions_hold_compliance_shorten": (
        "BEFORE UPDATE",
        "OLD.mode = 'compliance' AND (NEW.retain_until IS NULL OR julianday(NEW.retain_until) < "
        "julianday(OLD.retain_until))",
        "the retain-until date of a compliance hold can be extended, never shortened",
    ),
    "actions_hold_compliance_scope": (
        "BEFORE UPDATE",
        "OLD.mode = 'compliance' AND (NEW.run_id IS NOT OLD.run_id OR NEW.checkpoint_id IS NOT OLD.checkpoint_id)",
        "what a compliance hold covers cannot be changed",
    ),
    "actions_hold_compliance_release": (
        "BEFORE UPDATE",
        "OLD.mode = 'compliance' AND OLD.released_at IS NULL AND NEW.released_at IS NOT NULL "
        "AND julianday('now') < julianday(NEW.retain_until)",
        "a compliance hold cannot be released before its retain-until date",
    ),
}
SQLITE_INSTALL = [
    f"CREATE TRIGGER {name} {when} ON actions_hold FOR EACH ROW WHEN {condition} "
    f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
    for name, (when, condition, message) in _SQLITE_RULES.items()
]
SQLITE_REMOVE = [f"DROP TRIGGER IF EXISTS {name}" for name in _SQLITE_RULES]


def install(schema_editor) -> None:
    statements = {"postgresql": PG_INSTALL, "sqlite": SQLITE_INSTALL}.get(schema_editor.connection.vendor, [])
    for statement in statements:
        schema_editor.execute(statement)


def remove(schema_editor) -> None:
    statements = {"postgresql": PG_REMOVE, "sqlite": SQLITE_REMOVE}.get(schema_editor.connection.vendor, [])
    for statement in statements:
        schema_editor.execute(statement)
