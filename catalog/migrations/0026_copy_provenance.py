"""Provenance of copies: which copy the product wrote each one from, when, and by what (a move, an offload, a
promotion). Verification uses the source argument only where this is recorded."""

import django.db.models.deletion
from django.db import migrations, models

TABLE = "catalog_checkpointcopy"
_STASHED: list[tuple[str, str]] = []


def stash_sqlite_triggers(apps, schema_editor):
    """Going back, SQLite removes a column by rebuilding the table, and its rename fails on the triggers of other
    tables that name this one (the ownership guards of actions 0011): take them off for the rebuild."""
    if schema_editor.connection.vendor != "sqlite":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND sql LIKE %s", [f"%{TABLE}%"]
        )
        _STASHED[:] = cursor.fetchall()
        for name, _sql in _STASHED:
            cursor.execute(f'DROP TRIGGER "{name}"')


def restore_sqlite_triggers(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    with schema_editor.connection.cursor() as cursor:
        for _name, sql in _STASHED:
            cursor.execute(sql)
    _STASHED.clear()


class Migration(migrations.Migration):

    dependencies = [
        ('catalog', '0025_checkpoint_saved_at'),
    ]

    operations = [
        # Run backwards, these two wrap the rebuild (the last operation runs first).
        migrations.RunPython(migrations.RunPython.noop, restore_sqlite_triggers),
        migrations.AddField(
            model_name='checkpointcopy',
            name='made_at',
            field=models.DateTimeField(blank=True, help_text='When the product began writing it from made_from.', null=True),
        ),
        # A column with a default is added by rebuilding the table on SQLite, which the ownership guard triggers
        # (actions 0011) on this table forbid; ADD COLUMN with a constant default works on both databases.
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE catalog_checkpointcopy ADD COLUMN made_by varchar(60) NOT NULL DEFAULT ''",
                    "ALTER TABLE catalog_checkpointcopy DROP COLUMN made_by",
                ),
            ],
            state_operations=[
                migrations.AddField(
                    model_name='checkpointcopy',
                    name='made_by',
                    field=models.CharField(blank=True, default='', help_text="What wrote it from made_from, e.g. 'offload #12'.", max_length=60),
                ),
            ],
        ),
        migrations.AddField(
            model_name='checkpointcopy',
            name='made_from',
            field=models.ForeignKey(blank=True, help_text='The copy the product wrote this one from, when it did.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='made_copies', to='catalog.checkpointcopy'),
        ),
        migrations.RunPython(migrations.RunPython.noop, stash_sqlite_triggers),
    ]
