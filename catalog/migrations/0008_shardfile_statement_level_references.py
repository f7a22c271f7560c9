"""Shard files check their location and copy once per statement instead of once per row (PostgreSQL).

A foreign key checks every inserted row on its own (a trigger per row, each locking the referenced
row): at a million shard files per inventory that was two million checks, ~10 s at commit, as long
as writing the rows. The same rules are kept here by statement-level triggers over transition
tables, which check and lock each *distinct* referenced row once per statement:

- inserting or updating shard files whose ``location_id`` names no storage location, or whose
  ``copy_id`` names no checkpoint copy, fails with ``foreign_key_violation``;
- deleting a storage location or a checkpoint copy that shard files still refer to fails the same
  way (Django's CASCADE and SET_NULL handle those rows before the delete, as before).

The checks run at the end of each statement rather than at commit. On SQLite the foreign keys stay
in the table definition: only the model state changes there.
"""

from django.db import migrations, models

FUNCTIONS = [
    """
    CREATE OR REPLACE FUNCTION catalog_shardfile_refs_check() RETURNS trigger AS $$
    BEGIN
        -- Lock each referenced row once, as a foreign key would once per referencing row, so that a
        -- concurrent delete of a location or copy waits for this transaction and then sees its rows.
        PERFORM 1 FROM fleet_storagelocation l
            WHERE l.id IN (SELECT DISTINCT n.location_id FROM new_rows n) FOR KEY SHARE OF l;
        PERFORM 1 FROM catalog_checkpointcopy c
            WHERE c.id IN (SELECT DISTINCT n.copy_id FROM new_rows n WHERE n.copy_id IS NOT NULL)
            FOR KEY SHARE OF c;
        IF EXISTS (SELECT 1 FROM new_rows n
                   WHERE NOT EXISTS (SELECT 1 FROM fleet_storagelocation l WHERE l.id = n.location_id)) THEN
            RAISE EXCEPTION 'a shard file refers to a storage location that does not exist'
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'shardfile_location_exists';
        END IF;
        IF EXISTS (SELECT 1 FROM new_rows n
                   WHERE n.copy_id IS NOT NULL
                     AND NOT EXISTS (SELECT 1 FROM catalog_checkpointcopy c WHERE c.id = n.copy_id)) THEN
            RAISE EXCEPTION 'a shard file refers to a checkpoint copy that does not exist'
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'shardfile_copy_exists';
        END IF;
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE OR REPLACE FUNCTION catalog_shardfile_location_refs() RETURNS trigger AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM old_rows o JOIN catalog_shardfile f ON f.location_id = o.id) THEN
            RAISE EXCEPTION 'a storage location that shard files refer to cannot be deleted'
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'shardfile_location_exists';
        END IF;
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE OR REPLACE FUNCTION catalog_shardfile_copy_refs() RETURNS trigger AS $$
    BEGIN
        IF EXISTS (SELECT 1 FROM old_rows o JOIN catalog_shardfile f ON f.copy_id = o.id) THEN
            RAISE EXCEPTION 'a checkpoint copy that shard files refer to cannot be deleted'
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'shardfile_copy_exists';
        END IF;
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql
    """,
]
TRIGGERS = [
    # Transition tables allow one event per trigger: one for INSERT (and COPY), one for UPDATE.
    """
    CREATE TRIGGER catalog_shardfile_refs_insert AFTER INSERT ON catalog_shardfile
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION catalog_shardfile_refs_check()
    """,
    """
    CREATE TRIGGER catalog_shardfile_refs_update AFTER UPDATE ON catalog_shardfile
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION catalog_shardfile_refs_check()
    """,
    """
    CREATE TRIGGER catalog_shardfile_location_deleted AFTER DELETE ON fleet_storagelocation
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION catalog_shardfile_location_refs()
    """,
    """
    CREATE TRIGGER catalog_shardfile_copy_deleted AFTER DELETE ON catalog_checkpointcopy
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION catalog_shardfile_copy_refs()
    """,
]
DROP = [
    "DROP TRIGGER IF EXISTS catalog_shardfile_copy_deleted ON catalog_checkpointcopy",
    "DROP TRIGGER IF EXISTS catalog_shardfile_location_deleted ON fleet_storagelocation",
    "DROP TRIGGER IF EXISTS catalog_shardfile_refs_update ON catalog_shardfile",
    "DROP TRIGGER IF EXISTS catalog_shardfile_refs_insert ON catalog_shardfile",
    "DROP FUNCTION IF EXISTS catalog_shardfile_copy_refs()",
    "DROP FUNCTION IF EXISTS catalog_shardfile_location_refs()",
    "DROP FUNCTION IF EXISTS catalog_shardfile_refs_check()",
]
FOREIGN_KEYS = """
    SELECT c.conname FROM pg_constraint c
    JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
    WHERE c.conrelid = 'catalog_shardfile'::regclass AND c.contype = 'f' AND a.attname IN ('location_id', 'copy_id')
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(FOREIGN_KEYS)
        names = [row[0] for row in cursor.fetchall()]
    for name in names:
        schema_editor.execute(f'ALTER TABLE catalog_shardfile DROP CONSTRAINT "{name}"')
    for statement in [*FUNCTIONS, *TRIGGERS]:
        schema_editor.execute(statement)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for statement in DROP:
        schema_editor.execute(statement)
    schema_editor.execute(
        "ALTER TABLE catalog_shardfile ADD CONSTRAINT catalog_shardfile_location_id_fk_fleet_storagelocation_id "
        "FOREIGN KEY (location_id) REFERENCES fleet_storagelocation (id) DEFERRABLE INITIALLY DEFERRED"
    )
    schema_editor.execute(
        "ALTER TABLE catalog_shardfile ADD CONSTRAINT catalog_shardfile_copy_id_fk_catalog_checkpointcopy_id "
        "FOREIGN KEY (copy_id) REFERENCES catalog_checkpointcopy (id) DEFERRABLE INITIALLY DEFERRED"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0007_leaner_shardfile_indexes"),
        ("fleet", "0005_default_prices"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="shardfile",
                    name="copy",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=models.deletion.SET_NULL,
                        related_name="files",
                        to="catalog.checkpointcopy",
                    ),
                ),
                migrations.AlterField(
                    model_name="shardfile",
                    name="location",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=models.deletion.CASCADE,
                        related_name="files",
                        to="fleet.storagelocation",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(forward, backward)],
        ),
    ]
