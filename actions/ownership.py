"""The database keeps protection on the data it protects: what no ingest, admin, shell or raw SQL may re-point.

Holds and pins sit on checkpoint rows (and runs). A copy moved to another checkpoint, a file moved to a copy of
another checkpoint (or to none), or a checkpoint moved to another run would leave the hold or pin covering
nothing while the bytes it protected became deletable (issue 26: a rewritten sidecar walked a compliance-held
copy into a new, unprotected checkpoint). The ingest refuses such moves and records the conflict
(``catalog.services.Judge``); these triggers refuse them again for every other path, on PostgreSQL and SQLite:

- UPDATE of a copy's ``checkpoint_id`` while its checkpoint (or that checkpoint's run) is under an active hold
  or its checkpoint is pinned;
- UPDATE of a checkpoint's ``run_id`` while its run has an active whole-run hold, or the checkpoint itself is
  held or pinned (``Checkpoint.objects.filter(run=held_run).update(run=other)`` empties a run hold);
- UPDATE of a shard file's ``copy_id`` away from a copy of such a checkpoint, unless the new copy belongs to the
  same checkpoint.

Leases and scheduled deletions are refused by the ingest only: a lease lapses by the clock and a deletion's own
bookkeeping changes links, so the database would have to judge time and job states it does not own.
"""

from __future__ import annotations

# An SQL expression that is true when the checkpoint whose id is ``{ck}`` is under an active hold or pin.
_PROTECTED = """(
    EXISTS (SELECT 1 FROM actions_hold h WHERE h.released_at IS NULL AND (h.checkpoint_id = {ck}
            OR (h.checkpoint_id IS NULL AND h.run_id = (SELECT c.run_id FROM catalog_checkpoint c WHERE c.id = {ck}))))
    OR EXISTS (SELECT 1 FROM actions_pin p WHERE p.unpinned_at IS NULL AND p.checkpoint_id = {ck})
)"""
_RUN_PROTECTED = """(
    EXISTS (SELECT 1 FROM actions_hold h WHERE h.released_at IS NULL
            AND ((h.checkpoint_id IS NULL AND h.run_id = OLD.run_id) OR h.checkpoint_id = OLD.id))
    OR EXISTS (SELECT 1 FROM actions_pin p WHERE p.unpinned_at IS NULL AND p.checkpoint_id = OLD.id)
)"""
_COPY_MOVE = _PROTECTED.format(ck="OLD.checkpoint_id")
_OWNER_OF = "(SELECT k.checkpoint_id FROM catalog_checkpointcopy k WHERE k.id = {side}.copy_id)"
_OLD_OWNER = _OWNER_OF.format(side="OLD")
_NEW_OWNER = _OWNER_OF.format(side="NEW")
_FILE_MOVE = " ".join(
    [
        "OLD.copy_id IS NOT NULL AND",
        _PROTECTED.format(ck=_OLD_OWNER),
        f"AND (NEW.copy_id IS NULL OR {_NEW_OWNER} IS DISTINCT FROM {_OLD_OWNER})",
    ]
)

# (trigger name, table, column, condition, message)
_RULES = [
    (
        "actions_copy_owner_guard",
        "catalog_checkpointcopy",
        "checkpoint_id",
        _COPY_MOVE,
        "a copy of a held or pinned checkpoint cannot be moved to another checkpoint",
    ),
    (
        "actions_checkpoint_run_guard",
        "catalog_checkpoint",
        "run_id",
        _RUN_PROTECTED,
        "a held or pinned checkpoint, or one of a held run, cannot be moved to another run",
    ),
    (
        "actions_shardfile_owner_guard",
        "catalog_shardfile",
        "copy_id",
        _FILE_MOVE,
        "a file of a held or pinned checkpoint cannot be moved to another checkpoint",
    ),
]


def _pg(name: str, table: str, column: str, condition: str, message: str) -> list[str]:
    return [
        f"""
        CREATE OR REPLACE FUNCTION {name}() RETURNS trigger AS $$
        BEGIN
            IF {condition} THEN
                RAISE EXCEPTION '{table} %%: {message}', OLD.id USING ERRCODE = 'insufficient_privilege';
            END IF;
            RETURN NEW;
        END;
        $$ LANGUAGE plpgsql
        """,
        f"""
        CREATE TRIGGER {name} BEFORE UPDATE OF {column} ON {table} FOR EACH ROW
            WHEN (OLD.{column} IS DISTINCT FROM NEW.{column}) EXECUTE FUNCTION {name}()
        """,
    ]


PG_INSTALL = [statement for rule in _RULES for statement in _pg(*rule)]
PG_REMOVE = [
    sql
    for name, table, *_ in reversed(_RULES)
    for sql in (f"DROP TRIGGER IF EXISTS {name} ON {table}", f"DROP FUNCTION IF EXISTS {name}()")
]
SQLITE_INSTALL = [
    f"CREATE TRIGGER {name} BEFORE UPDATE OF {column} ON {table} FOR EACH ROW "
    f"WHEN OLD.{column} IS NOT NEW.{column} AND {condition.replace('IS DISTINCT FROM', 'IS NOT')} "
    f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
    for name, table, column, condition, message in _RULES
]
SQLITE_REMOVE = [f"DROP TRIGGER IF EXISTS {name}" for name, *_ in _RULES]


def install(schema_editor) -> None:
    statements = {"postgresql": PG_INSTALL, "sqlite": SQLITE_INSTALL}.get(schema_editor.connection.vendor, [])
    for statement in statements:
        schema_editor.execute(statement)


def remove(schema_editor) -> None:
    statements = {"postgresql": PG_REMOVE, "sqlite": SQLITE_REMOVE}.get(schema_editor.connection.vendor, [])
    for statement in statements:
        schema_editor.execute(statement)
