"""Orbax (JAX) CheckpointManager step directories: ``root/{step}/`` (or ``{prefix}_{step}/``).

A step holds ``_CHECKPOINT_METADATA`` (JSON with ``init_timestamp_nsecs``, ``commit_timestamp_nsecs``,
``item_handlers``), optionally ``commit_success.txt`` (object stores, where a rename is impossible), and
one directory per item (``_METADATA``, ``_sharding``, ``manifest.ocdbt``, ``d/``, ``ocdbt.process_{i}/``).
Orbax writes into ``{step}.orbax-checkpoint-tmp[-{timestamp}]`` and renames it when finalised.

Judgement: a ``*.orbax-checkpoint-tmp*`` directory -> temporary and partial; ``_CHECKPOINT_METADATA``
without ``commit_timestamp_nsecs`` -> partial; an item it names missing -> partial; an OCDBT item whose
per-process manifests were never merged into ``manifest.ocdbt``, or without ``_METADATA`` -> partial;
unreadable metadata -> corrupt. Without ``_CHECKPOINT_METADATA`` (older Orbax) the finalised name is all
there is to go by, and a note says so.

The number of ``ocdbt.process_{i}/`` folders is taken from those present: the step metadata (``item_handlers``,
``metrics``, the timestamps, ``custom_metadata``) and the item's ``_METADATA`` (its tree) record no process count,
so the verdict notes that a step missing its highest process's folder would look whole.
"""

from __future__ import annotations

import re

from catalog.formats.base import CORRUPT, PARTIAL, CheckpointFormat, DirView, Found
from catalog.formats.common import contiguous_gaps, json_content, new_found, note_inferred, ranks_list

_TMP = re.compile(r"^(?P<step>.+?)\.orbax-checkpoint-tmp(?:-\d+)?$")
_STEP = re.compile(r"^(?:.*_)?(\d+)$")
_PROCESS = re.compile(r"^ocdbt\.process_(\d+)$")
CHECKPOINT_METADATA = "_CHECKPOINT_METADATA"
COMMIT_SUCCESS = "commit_success.txt"


def _is_item(sub: DirView) -> bool:
    return "_METADATA" in sub.files or "manifest.ocdbt" in sub.files or any(_PROCESS.match(n) for n in sub.dirs)


class OrbaxFormat(CheckpointFormat):
    """An Orbax step directory, finalised or a left-over temporary one."""

    name = "orbax"
    label = "Orbax"
    priority = 40

    def claim(self, directory: DirView) -> list[Found]:
        tmp = _TMP.match(directory.name)
        files = directory.files
        is_orbax = (
            tmp is not None
            or CHECKPOINT_METADATA in files
            or COMMIT_SUCCESS in files
            or (_STEP.match(directory.name) is not None and any(_is_item(s) for s in directory.dirs.values()))
        )
        if not is_orbax:
            return []
        found = new_found(directory, self.name)
        if tmp is not None:
            step = _STEP.match(tmp["step"])
            found.step = int(step.group(1)) if step else None
            found.temporary = True
            found.fail(PARTIAL, f"interrupted save: Orbax never renamed {directory.name} to its final name")

        meta_entry = files.get(CHECKPOINT_METADATA)
        meta = json_content(found, meta_entry, CHECKPOINT_METADATA)
        if meta_entry is None and COMMIT_SUCCESS not in files and tmp is None:
            found.reasons.append(
                f"no {CHECKPOINT_METADATA} (older Orbax?): judged finalised from the directory name alone"
            )
        if isinstance(meta, dict):
            if not meta.get("commit_timestamp_nsecs"):
                found.fail(
                    PARTIAL,
                    f"{CHECKPOINT_METADATA} has no commit_timestamp_nsecs: the save was never finalised",
                )
            handlers = meta.get("item_handlers")
            if isinstance(handlers, dict):
                for item in sorted(handlers):
                    if item not in directory.dirs:
                        found.fail(PARTIAL, f"item {item}/ is missing (listed in {CHECKPOINT_METADATA})")
        elif meta is not None:
            found.fail(CORRUPT, f"{CHECKPOINT_METADATA} is not a JSON object")

        for name, sub in sorted(directory.dirs.items()):
            if _is_item(sub):
                self._check_item(found, name, sub)
        return [found]

    @staticmethod
    def _check_item(found: Found, name: str, item: DirView) -> None:
        processes = {int(m.group(1)) for sub in item.dirs if (m := _PROCESS.match(sub))}
        for rank in contiguous_gaps(processes):
            found.fail(
                PARTIAL,
                f"{name}/ocdbt.process_{rank}/ is missing (processes {ranks_list(processes)} wrote theirs)",
            )
        if processes:
            note_inferred(
                found,
                f"the number of processes of {name}/ ({max(processes) + 1:,})",
                f"{CHECKPOINT_METADATA} and {name}/_METADATA do not record it",
            )
        if processes and "manifest.ocdbt" not in item.files:
            found.fail(PARTIAL, f"{name}/manifest.ocdbt is missing: the per-process manifests were never merged")
        if ("manifest.ocdbt" in item.files or processes) and "_METADATA" not in item.files:
            found.fail(PARTIAL, f"{name}/_METADATA is missing")
        for process in sorted(processes):
            sub = item.dirs[f"ocdbt.process_{process}"]
            if "manifest.ocdbt" not in sub.files:
                found.fail(PARTIAL, f"{name}/ocdbt.process_{process}/manifest.ocdbt is missing")
        json_content(found, item.files.get("_METADATA"), f"{name}/_METADATA")
