"""Small helpers shared by the format recognisers: steps from names, reading facts, cheap file checks.

Everything here works on ``FileEntry.facts`` as the host agent reports them (docs/wire-format.md). Facts
are optional: a bucket listing usually has none, so every check that needs facts silently does nothing
without them and the recognisers fall back to what file names and sizes say.
"""

from __future__ import annotations

import re
from typing import Any

from catalog.formats.base import CORRUPT, PARTIAL, DirView, FileEntry, Found

# Step numbers in directory and file names, most specific first (FORMATS.md lists the frameworks' own).
_STEP_PATTERNS = [
    re.compile(r"^checkpoint-(\d+)$"),  # HF Trainer
    re.compile(r"^global_step(\d+)$"),  # DeepSpeed
    re.compile(r"^iter_(\d+)$"),  # Megatron
    re.compile(r"^step[-_]?(\d+)$"),  # torchtitan step-N and friends
    re.compile(r"(?:^|[^a-z_])step=(\d+)"),  # Lightning / NeMo epoch=0-step=100
    re.compile(r"^(?:ep\d+-)?ba(\d+)(?:-rank\d+)?$"),  # Composer ep{e}-ba{b}[-rank0]
    re.compile(r"^(?:[A-Za-z_]+_)?(\d+)$"),  # Orbax {step} or {prefix}_{step}
]

# A file's size may trail its writer's mtime a little on a real file system; a sub-second gap is noise.
MTIME_TOLERANCE_SECONDS = 2.0

TORCH_EXTENSIONS = (".pt", ".pth", ".bin", ".ckpt")


def step_from_name(name: str) -> int | None:
    """The training step a checkpoint directory or file name encodes, or None."""
    for suffix in (".ckpt", ".pt", ".pth", ".safetensors", ".nemo"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    for pattern in _STEP_PATTERNS:
        match = pattern.search(name)
        if match:
            return int(match.group(1))
    return None


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"


def size_words(difference: int) -> str:
    return plural(abs(difference), "byte")


def new_found(directory: DirView, format_name: str, *, subtree: bool = True) -> Found:
    """A Found for a checkpoint directory, owning every file below it (or only its own files)."""
    entries = directory.walk_files() if subtree else directory.files.values()
    return Found(
        path=directory.path,
        format=format_name,
        step=step_from_name(directory.name),
        files=sorted(e.path for e in entries),
    )


def lookup(directory: DirView, relative: str) -> FileEntry | None:
    """The file at ``relative`` (a '/'-separated path) below ``directory``, if the inventory has it."""
    *parts, name = relative.split("/")
    node: DirView | None = directory
    for part in parts:
        node = node.dirs.get(part) if node is not None else None
    return node.files.get(name) if node is not None else None


def facts_of(entry: FileEntry | None, kind: str) -> dict[str, Any] | None:
    """The entry's facts if they are of ``kind`` (with or without an ``error``), else None."""
    if entry is None or not entry.facts or entry.facts.get("kind") != kind:
        return None
    return entry.facts


def json_content(found: Found, entry: FileEntry | None, label: str) -> Any:
    """The parsed JSON the agent sent for ``entry``; an unreadable file makes the copy corrupt.

    Returns None when the file is absent, was not read, or could not be parsed.
    """
    facts = facts_of(entry, "json")
    if facts is None:
        return None
    if "error" in facts:
        found.fail(CORRUPT, f"{label} cannot be read: {facts['error']}")
        return None
    return facts.get("content")


def text_content(entry: FileEntry | None) -> str | None:
    facts = facts_of(entry, "text")
    if facts is None or "error" in facts:
        return None
    content = facts.get("content")
    return content.strip() if isinstance(content, str) else None


def check_torch_file(found: Found, entry: FileEntry, label: str) -> None:
    """A torch.save file must be a whole zip (end record present) or a pickle that ends with '.'."""
    facts = facts_of(entry, "torch_file")
    if facts is None:
        return
    if "error" in facts:
        found.fail(CORRUPT, f"{label} cannot be read: {facts['error']}")
    elif facts.get("container") == "unknown":
        found.fail(CORRUPT, f"{label} is not a torch.save file (neither a zip archive nor a pickle)")
    elif facts.get("complete") is False:
        if facts.get("container") == "zip":
            found.fail(CORRUPT, f"{label} is truncated: its zip end-of-central-directory record is missing")
        else:
            found.fail(CORRUPT, f"{label} is truncated: the pickle stream does not end")
    bad = facts.get("members_bad")
    if isinstance(bad, list) and bad:
        # The zip records each member's CRC32 at save time; the agent's checksum pass computes them again.
        more = f" (and {len(bad) - 1:,} more)" if len(bad) > 1 else ""
        found.fail(CORRUPT, f"{label}: the CRC32 of zip member {bad[0]} differs from the one the zip records{more}")


def check_safetensors(found: Found, entry: FileEntry, label: str) -> int | None:
    """The safetensors loader requires 8 + header + max(data end) == file size; returns the expected size."""
    facts = facts_of(entry, "safetensors")
    if facts is None:
        return None
    if "error" in facts:
        found.fail(CORRUPT, f"{label} has an unreadable header: {facts['error']}")
        return None
    expected = facts.get("expected_size")
    if not isinstance(expected, int):
        return None
    if entry.size < expected:
        found.fail(CORRUPT, f"{label} is {size_words(expected - entry.size)} shorter than its header says")
    elif entry.size > expected:
        found.fail(CORRUPT, f"{label} is {size_words(entry.size - expected)} longer than its header says")
    return expected


def check_member_files(found: Found, directory: DirView, where: str = "") -> None:
    """Cheap checks of every file below ``directory`` that the agent read: torch zips and safetensors."""
    for entry in directory.walk_files():
        label = where + entry.path[len(directory.path) + 1 :] if directory.path else where + entry.path
        if entry.name.endswith(".safetensors"):
            check_safetensors(found, entry, label)
        elif entry.name.endswith(TORCH_EXTENSIONS):
            check_torch_file(found, entry, label)


def contiguous_gaps(present: set[int]) -> list[int]:
    """The numbers missing from 0..max(present): ranks that should exist because a higher one does."""
    if not present:
        return []
    return [i for i in range(max(present) + 1) if i not in present]


def unfinished_marker(parent: DirView | None, name: str) -> FileEntry | None:
    """NeMo's ``<checkpoint>-unfinished`` marker beside a checkpoint, which exists while it is saved."""
    if parent is None:
        return None
    base = name
    for suffix in (".nemo", ".ckpt"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    return parent.files.get(base + "-unfinished")


def mark_unfinished(found: Found, parent: DirView | None, name: str) -> None:
    """An unfinished marker makes the copy a temporary left-over of an interrupted save."""
    marker = unfinished_marker(parent, name)
    if marker is None:
        return
    found.temporary = True
    found.fail(PARTIAL, f"interrupted save: the marker {marker.name} still exists")
    if marker.path not in found.files:
        found.files.append(marker.path)
        found.files.sort()


# The words every verdict uses when a format's number of ranks comes from the rank files present, not from the
# checkpoint's own records: such a save missing its highest rank cannot be told from a complete smaller save.
# ``catalog.pointers`` recognises the note by them (a note, not a failure).
INFERRED = "inferred from the files present"


def note_inferred(found: Found, what: str, why: str) -> None:
    """Say that ``what`` (e.g. "the number of ranks") is inferred from the files present, and ``why`` no record
    says it; a note on the copy's verdict, which changes nothing of its state."""
    found.reasons.append(f"{what} is {INFERRED} ({why}): a save missing its highest rank would look complete")


def is_note_inferred(reason: str) -> bool:
    return INFERRED in reason


def ranks_list(values: set[int] | list[int]) -> str:
    """'0, 1 and 3' for reasons."""
    items = [str(v) for v in sorted(values)]
    if len(items) <= 1:
        return "".join(items)
    if len(items) > 8:
        return f"{items[0]}..{items[-1]} ({len(items)} of them)"
    return ", ".join(items[:-1]) + " and " + items[-1]
