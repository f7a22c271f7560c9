"""Applying an inventory: validate every line, stage it in bulk, then merge it in set-based SQL.

The flow keeps the promise that bad input changes nothing: the whole upload is parsed and staged
before anything touches the catalog, and the merge of staged rows into ``catalog_shardfile`` is
three statements in one transaction (update changed, insert new, mark gone). Staging uses COPY on
PostgreSQL and batched INSERTs on SQLite, in chunks of ``INGEST_CHUNK_ROWS``; memory is bounded by
one chunk, whatever the size of the inventory.

A location's first inventory, sorted by path as the agent sends it, takes a shorter way
(``direct.ingest_direct``): it is read in one pass, each run directory judged as soon as its last file has
passed, and its rows written straight into ``catalog_shardfile`` with their copies (COPY on
PostgreSQL, from a second thread, while the next run directories are read), in one transaction.
Anything that way does not take as it is (every invalid line among it) goes the line-by-line way,
which names the line and the reason.

The modules, from the bottom:

- ``rows``: ``Row``, the staged columns, ``InventoryError``;
- ``lines``: the line-by-line reader and its checks (``check_path``, ``read_inventory``);
- ``staging``: staging rows in bulk and emptying them (``stage_rows``, ``unstage``);
- ``apply``: the end of every apply, shared by both ways and the scanner (``end_apply``, ``fail``, ...);
- ``staged``: the merge of a staged snapshot and its judging (``apply_staged``, ``staged_group``);
- ``direct_reader`` and ``direct``: the one-pass way;
- ``run``: applying one received inventory (``ingest``), the entry point of the task;
- ``sweep``: the periodic care of the inventory queue.

This package re-exports the public names other apps use; its own modules import from the defining module.
"""

from fleet.agent import MAX_PATH_BYTES
from ingest.inventory.apply import MergeCounts, end_apply, fail, flush_every, log_applied
from ingest.inventory.lines import check_path, read_inventory
from ingest.inventory.rows import STAGED_COLUMNS, InventoryError, Row
from ingest.inventory.run import ingest
from ingest.inventory.staged import apply_staged, staged_group
from ingest.inventory.staging import stage, stage_rows, unstage
from ingest.inventory.sweep import SweepCounts, sweep

__all__ = [
    "MAX_PATH_BYTES",
    "STAGED_COLUMNS",
    "InventoryError",
    "MergeCounts",
    "Row",
    "SweepCounts",
    "apply_staged",
    "check_path",
    "end_apply",
    "fail",
    "flush_every",
    "ingest",
    "log_applied",
    "read_inventory",
    "stage",
    "stage_rows",
    "staged_group",
    "sweep",
    "unstage",
]
