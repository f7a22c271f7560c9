"""Every guard trigger fires ALWAYS, also in a session with ``session_replication_role = replica``.

PostgreSQL skips triggers in ``ENABLE`` (origin) state when a session sets ``session_replication_role = replica``,
which is how an intruder with enough rights releases a compliance hold or edits an audit event without ALTER TABLE.
``ENABLE ALWAYS`` triggers fire in that mode too. This runs after the migrations that made the triggers (audit 0003,
catalog 0003, actions 0006, retention 0003) and turns every user trigger of the schema to ALWAYS; a later migration
that adds a trigger makes it ALWAYS itself, and ``manage.py fleet_db_roles`` does it again for any it finds
(docs/admin/database-roles.md). SQLite has no such mode and nothing to do.
"""

from django.db import migrations

from ckptfleet.dbroles import guard_triggers, guard_triggers_always


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            guard_triggers_always(cursor)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            for table, name, enabled in guard_triggers(cursor):
                if enabled == "A":
                    cursor.execute(f'ALTER TABLE "{table}" ENABLE TRIGGER "{name}"')


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_chain_head_trigger"),
        ("catalog", "0008_shardfile_statement_level_references"),
        ("actions", "0006_compliance_hold_triggers"),
        ("retention", "0003_retention_lock_triggers"),
    ]
    operations = [migrations.RunPython(forward, backward)]
