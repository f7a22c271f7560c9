"""PostgreSQL-only integrity and speed that the ORM cannot express.

- ``path`` columns use the "C" collation, so ordering and ``>=``/``<`` ranges are bytewise (as on
  SQLite): a directory's files are one contiguous index range.
- The ingest staging table is UNLOGGED: it is rebuilt from the stored upload if lost.
- Audit events refuse UPDATE, DELETE and TRUNCATE in the database itself.
"""

from django.db import migrations

FORWARD = [
    'ALTER TABLE catalog_shardfile ALTER COLUMN path TYPE text COLLATE "C"',
    'ALTER TABLE catalog_ingestrow ALTER COLUMN path TYPE text COLLATE "C"',
    'ALTER TABLE catalog_checkpointcopy ALTER COLUMN path TYPE text COLLATE "C"',
    "ALTER TABLE catalog_ingestrow SET UNLOGGED",
    """
    CREATE OR REPLACE FUNCTION catalog_audit_append_only() RETURNS trigger AS $$
    BEGIN
        RAISE EXCEPTION 'audit events are append-only (%% refused)', TG_OP USING ERRCODE = 'insufficient_privilege';
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER catalog_auditevent_no_update_delete
        BEFORE UPDATE OR DELETE ON catalog_auditevent
        FOR EACH ROW EXECUTE FUNCTION catalog_audit_append_only()
    """,
    """
    CREATE TRIGGER catalog_auditevent_no_truncate
        BEFORE TRUNCATE ON catalog_auditevent
        FOR EACH STATEMENT EXECUTE FUNCTION catalog_audit_append_only()
    """,
]
BACKWARD = [
    "DROP TRIGGER IF EXISTS catalog_auditevent_no_truncate ON catalog_auditevent",
    "DROP TRIGGER IF EXISTS catalog_auditevent_no_update_delete ON catalog_auditevent",
    "DROP FUNCTION IF EXISTS catalog_audit_append_only()",
    "ALTER TABLE catalog_ingestrow SET LOGGED",
]


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in FORWARD:
        schema_editor.execute(statement)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in BACKWARD:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [("catalog", "0002_initial")]
    operations = [migrations.RunPython(forward, backward)]
