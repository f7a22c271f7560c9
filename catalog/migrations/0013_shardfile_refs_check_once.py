"""Shard files' reference check reads a statement's new rows once (PostgreSQL).

Migration 0008's statement-level trigger looked at the transition table four times: once for the
distinct locations, once for the distinct copies, and once more for each ``NOT EXISTS`` check, the
last two probing the referenced table once per *row*. It now collects the distinct locations and
copies in one pass, then locks and counts the referenced rows once per distinct id: the same rules
(a missing location or copy fails with ``foreign_key_violation`` naming the same constraint), the
same locks, a fraction of the work for a COPY of tens of thousands of rows.
"""

import importlib

from django.db import migrations

CHECK_ONCE = """
CREATE OR REPLACE FUNCTION catalog_shardfile_refs_check() RETURNS trigger AS $$
DECLARE
    locations bigint[];
    copies bigint[];
    found integer;
BEGIN
    SELECT array_agg(DISTINCT n.location_id), array_agg(DISTINCT n.copy_id) FILTER (WHERE n.copy_id IS NOT NULL)
        INTO locations, copies
        FROM new_rows n;
    IF locations IS NULL THEN
        RETURN NULL;
    END IF;
    -- Lock each referenced row once, as a foreign key would once per referencing row, so that a
    -- concurrent delete of a location or copy waits for this transaction and then sees its rows.
    SELECT count(*) INTO found
        FROM (SELECT 1 FROM fleet_storagelocation l WHERE l.id = ANY (locations) FOR KEY SHARE OF l) x;
    IF found <> cardinality(locations) THEN
        RAISE EXCEPTION 'a shard file refers to a storage location that does not exist'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'shardfile_location_exists';
    END IF;
    IF copies IS NOT NULL THEN
        SELECT count(*) INTO found
            FROM (SELECT 1 FROM catalog_checkpointcopy c WHERE c.id = ANY (copies) FOR KEY SHARE OF c) y;
        IF found <> cardinality(copies) THEN
            RAISE EXCEPTION 'a shard file refers to a checkpoint copy that does not exist'
                USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'shardfile_copy_exists';
        END IF;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CHECK_ONCE)


def backward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        # Migration 0008's body, restored as it wrote it.
        previous = importlib.import_module("catalog.migrations.0008_shardfile_statement_level_references")
        schema_editor.execute(previous.FUNCTIONS[0])


class Migration(migrations.Migration):
    dependencies = [("catalog", "0012_usage_day_tier_index")]

    operations = [migrations.RunPython(forward, backward)]
