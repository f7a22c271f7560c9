"""The database keeps a retention lock too: past its cooling-off a locked policy is never unlocked, deleted or loosened.

``retention.services`` refuses the same first, with a message; these triggers are for every other way in
(a raw UPDATE, the shell, a bug). A policy is *bound* when ``locked_at`` is set and
``lock_cooling_off_ends_at`` has passed (the database's own clock). For a bound policy:

- DELETE is refused (and TRUNCATE of the table on PostgreSQL while any policy is bound);
- an UPDATE is refused when it changes the lock columns (unlocks it, or moves its cooling-off), moves the
  policy to another team or run, enables it, or loosens a rule: keep_last lower, keep_every switched off
  or changed to a value that does not divide the old one, keep_milestones / keep_critical / keep_stepless
  switched off (the comparison of ``retention.rules.loosenings``). Renaming, disabling and the proposal
  bookkeeping (``last_proposed_at``) stay allowed.

Before its cooling-off ends a locked policy is not guarded here: a different approver may still unlock it.

SQLite drops a table's triggers when Django copies the table to alter it, so a later migration that alters
retention_retentionpolicy on SQLite must create them again (tests/retention/test_lock.py checks they exist).
"""

from django.db import migrations

TABLE = "retention_retentionpolicy"

# The loosening test, written once for both databases (NEW and OLD rows; booleans are 0/1 on SQLite).
LOOSENS = """
    NEW.locked_at IS DISTINCT FROM OLD.locked_at
    OR NEW.lock_cooling_off_ends_at IS DISTINCT FROM OLD.lock_cooling_off_ends_at
    OR NEW.locked_by_id IS DISTINCT FROM OLD.locked_by_id
    OR NEW.team_id IS DISTINCT FROM OLD.team_id
    OR NEW.run_id IS DISTINCT FROM OLD.run_id
    OR NEW.keep_last < OLD.keep_last
    OR (OLD.keep_every <> 0 AND (NEW.keep_every = 0 OR OLD.keep_every % NULLIF(NEW.keep_every, 0) <> 0))
    OR (OLD.keep_milestones AND NOT NEW.keep_milestones)
    OR (OLD.keep_critical AND NOT NEW.keep_critical)
    OR (OLD.keep_stepless AND NOT NEW.keep_stepless)
    OR (NEW.enabled AND NOT OLD.enabled)
"""
MESSAGE = "a locked retention policy past its cooling-off can only be made stricter"

POSTGRES_FORWARD = [
    f"""
    CREATE OR REPLACE FUNCTION retention_policy_lock_guard() RETURNS trigger AS $$
    BEGIN
        IF TG_OP = 'TRUNCATE' THEN
            IF EXISTS (SELECT 1 FROM {TABLE} WHERE lock_cooling_off_ends_at <= clock_timestamp()) THEN
                RAISE EXCEPTION '{MESSAGE} (TRUNCATE refused)' USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NULL;
        END IF;
        IF OLD.locked_at IS NULL OR OLD.lock_cooling_off_ends_at > clock_timestamp() THEN
            IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
            RETURN NEW;
        END IF;
        IF TG_OP = 'DELETE' THEN
            RAISE EXCEPTION '{MESSAGE} (policy % cannot be deleted)', OLD.id USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF {LOOSENS} THEN
            RAISE EXCEPTION '{MESSAGE} (policy %: this UPDATE loosens it or its lock)', OLD.id
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN NEW;
    END;
    $$ LANGUAGE plpgsql
    """,
    f"""
    CREATE TRIGGER retention_policy_lock_rows BEFORE UPDATE OR DELETE ON {TABLE}
        FOR EACH ROW EXECUTE FUNCTION retention_policy_lock_guard()
    """,
    f"""
    CREATE TRIGGER retention_policy_lock_truncate BEFORE TRUNCATE ON {TABLE}
        FOR EACH STATEMENT EXECUTE FUNCTION retention_policy_lock_guard()
    """,
]
POSTGRES_BACKWARD = [
    f"DROP TRIGGER IF EXISTS retention_policy_lock_truncate ON {TABLE}",
    f"DROP TRIGGER IF EXISTS retention_policy_lock_rows ON {TABLE}",
    "DROP FUNCTION IF EXISTS retention_policy_lock_guard()",
]

# SQLite stores times as UTC text ("YYYY-MM-DD HH:MM:SS[.ffffff]"), which sorts as the times do; its own
# clock in the same shape is strftime('%Y-%m-%d %H:%M:%f', 'now'). IS NOT is its IS DISTINCT FROM.
_BOUND = "OLD.locked_at IS NOT NULL AND OLD.lock_cooling_off_ends_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')"
SQLITE_TRIGGERS = {
    "retention_policy_lock_no_delete": f"""
    CREATE TRIGGER retention_policy_lock_no_delete BEFORE DELETE ON {TABLE}
    WHEN {_BOUND}
    BEGIN SELECT RAISE(ABORT, '{MESSAGE} (DELETE refused)'); END
    """,
    "retention_policy_lock_only_stricter": f"""
    CREATE TRIGGER retention_policy_lock_only_stricter BEFORE UPDATE ON {TABLE}
    WHEN {_BOUND} AND ({LOOSENS.replace("IS DISTINCT FROM", "IS NOT")})
    BEGIN SELECT RAISE(ABORT, '{MESSAGE} (this UPDATE loosens it or its lock)'); END
    """,
}


def forward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for statement in POSTGRES_FORWARD:
            schema_editor.execute(statement, params=None)  # no %-interpolation: the SQL has % in it
    elif vendor == "sqlite":
        for statement in SQLITE_TRIGGERS.values():
            schema_editor.execute(statement, params=None)  # no %-interpolation: the SQL has % in it


def backward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for statement in POSTGRES_BACKWARD:
            schema_editor.execute(statement, params=None)  # no %-interpolation: the SQL has % in it
    elif vendor == "sqlite":
        for name in SQLITE_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("retention", "0002_retention_lock")]
    operations = [migrations.RunPython(forward, backward)]
