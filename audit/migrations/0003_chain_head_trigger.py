"""The database guards the chain head as it guards the events: the head only moves forward, one event at a time.

Without this, whoever could get past the events' trigger could rewrite events and then set the head to match. Now
an UPDATE of the head must add exactly 1 to its count and point it at an event that follows the old head (its
``prev_hash`` is the old ``last_hash``); DELETE and TRUNCATE are refused; a new head starts at the genesis.

SQLite gets the same rules, and the events' append-only rule that PostgreSQL has had since catalog 0003. SQLite drops
a table's triggers when Django copies the table to alter it, so a later migration that alters either table on SQLite
must create them again (tests/audit/test_chain_head_trigger.py checks they exist).
"""

from django.db import migrations

GENESIS = "0" * 64

POSTGRES_FORWARD = [
    f"""
    CREATE OR REPLACE FUNCTION audit_chain_head_guard() RETURNS trigger AS $$
    BEGIN
        IF TG_OP = 'DELETE' OR TG_OP = 'TRUNCATE' THEN
            RAISE EXCEPTION 'the audit chain head only moves forward (%% refused)', TG_OP
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        IF TG_OP = 'INSERT' THEN
            IF NEW.count <> 0 OR NEW.last_hash <> '{GENESIS}' THEN
                RAISE EXCEPTION 'the audit chain head only moves forward (a new head starts at the genesis)'
                    USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END IF;
        IF NEW.id <> OLD.id OR NEW.count <> OLD.count + 1 OR NOT EXISTS (
            SELECT 1 FROM catalog_auditevent WHERE hash = NEW.last_hash AND prev_hash = OLD.last_hash
        ) THEN
            RAISE EXCEPTION 'the audit chain head only moves forward (count %% to %%: one step, to an event that follows it)',
                OLD.count, NEW.count USING ERRCODE = 'insufficient_privilege';
        END IF;
        RETURN NEW;
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER audit_chain_head_guard_rows
        BEFORE INSERT OR UPDATE OR DELETE ON catalog_auditchainhead
        FOR EACH ROW EXECUTE FUNCTION audit_chain_head_guard()
    """,
    """
    CREATE TRIGGER audit_chain_head_no_truncate
        BEFORE TRUNCATE ON catalog_auditchainhead
        FOR EACH STATEMENT EXECUTE FUNCTION audit_chain_head_guard()
    """,
]
POSTGRES_BACKWARD = [
    "DROP TRIGGER IF EXISTS audit_chain_head_no_truncate ON catalog_auditchainhead",
    "DROP TRIGGER IF EXISTS audit_chain_head_guard_rows ON catalog_auditchainhead",
    "DROP FUNCTION IF EXISTS audit_chain_head_guard()",
]

# By name, so that the tests can put back one they took away for Django's flush (which DELETEs on SQLite).
SQLITE_TRIGGERS = {
    "audit_chain_head_no_delete": """
    CREATE TRIGGER audit_chain_head_no_delete BEFORE DELETE ON catalog_auditchainhead
    BEGIN SELECT RAISE(ABORT, 'the audit chain head only moves forward (DELETE refused)'); END
    """,
    "audit_chain_head_insert": f"""
    CREATE TRIGGER audit_chain_head_insert BEFORE INSERT ON catalog_auditchainhead
    WHEN NEW.count <> 0 OR NEW.last_hash <> '{GENESIS}'
    BEGIN SELECT RAISE(ABORT, 'the audit chain head only moves forward (a new head starts at the genesis)'); END
    """,
    "audit_chain_head_advance": """
    CREATE TRIGGER audit_chain_head_advance BEFORE UPDATE ON catalog_auditchainhead
    WHEN NEW.id <> OLD.id OR NEW.count <> OLD.count + 1 OR NOT EXISTS (
        SELECT 1 FROM catalog_auditevent WHERE hash = NEW.last_hash AND prev_hash = OLD.last_hash
    )
    BEGIN SELECT RAISE(ABORT, 'the audit chain head only moves forward (one step, to an event that follows it)'); END
    """,
    "catalog_auditevent_no_update": """
    CREATE TRIGGER catalog_auditevent_no_update BEFORE UPDATE ON catalog_auditevent
    BEGIN SELECT RAISE(ABORT, 'audit events are append-only (UPDATE refused)'); END
    """,
    "catalog_auditevent_no_delete": """
    CREATE TRIGGER catalog_auditevent_no_delete BEFORE DELETE ON catalog_auditevent
    BEGIN SELECT RAISE(ABORT, 'audit events are append-only (DELETE refused)'); END
    """,
}


def forward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for statement in POSTGRES_FORWARD:
            schema_editor.execute(statement)
    elif vendor == "sqlite":
        for statement in SQLITE_TRIGGERS.values():
            schema_editor.execute(statement)


def backward(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        for statement in POSTGRES_BACKWARD:
            schema_editor.execute(statement)
    elif vendor == "sqlite":
        for name in SQLITE_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_keyed_chain_anchors")]
    operations = [migrations.RunPython(forward, backward)]
