"""Recognition: which files of one storage location's inventory form which checkpoints.

``recognize`` turns the flat file list of one location into a ``DirView`` tree, then walks it parents
before children, offering each directory that still has unclaimed files to the formats of
``catalog.formats.FORMATS`` in priority order (the rules are in ``CheckpointFormat``'s docstring):

- the files a returned ``Found`` lists are claimed and never offered to another format;
- once a format returns a copy *of the directory itself*, no other format sees that directory; when it
  returned only copies of single files, the next formats see the files that are left;
- a directory whose every file (at any depth) is claimed is not descended into; any other one is, and
  its formats see only the unclaimed files.

Pure Python, no Django: it runs inside workers over groups of up to ~100k files. Work is linear in the
number of files times the directory depth; formats look at a directory's own files and its immediate
subdirectories unless they claim it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from catalog.formats import FORMATS
from catalog.formats.base import CheckpointFormat, DirView, FileEntry, Found

__all__ = ["build_tree", "entries_from_agent_lines", "recognize"]


def entries_from_agent_lines(lines: Iterable[Mapping[str, Any]]) -> list[FileEntry]:
    """FileEntry values from the agent's wire-format line dicts (docs/wire-format.md).

    Only ``"file"`` lines are used (header and trailer are skipped); the line is assumed to be validated
    by the ingest already. A ``sha256`` becomes the entry's checksum with algorithm ``"sha256"``.
    """
    entries = []
    for line in lines:
        if line.get("type") != "file":
            continue
        sha256 = line.get("sha256")
        entries.append(
            FileEntry(
                path=line["path"],
                size=int(line["size"]),
                mtime=float(line.get("mtime") or 0.0),
                facts=line.get("facts") or None,
                checksum=sha256 or None,
                checksum_algo="sha256" if sha256 else None,
            )
        )
    return entries


def build_tree(files: Iterable[FileEntry]) -> DirView:
    """The directory tree of a location's files; raises ValueError on a path that occurs twice."""
    root = DirView(path="")
    dirs: dict[str, DirView] = {"": root}
    for entry in files:
        parent_path, _, name = entry.path.rpartition("/")
        parent = dirs.get(parent_path)
        if parent is None:
            parent = _make_dirs(dirs, parent_path)
        if name in parent.files:
            raise ValueError(f"duplicate path in inventory: {entry.path}")
        parent.files[name] = entry
    return root


def _make_dirs(dirs: dict[str, DirView], path: str) -> DirView:
    """Create ``path`` and any missing ancestors (iteratively: paths may be deep)."""
    missing = []
    while path not in dirs:
        missing.append(path)
        path = path.rpartition("/")[0]
    node = dirs[path]
    for sub_path in reversed(missing):
        child = DirView(path=sub_path, parent=node)
        node.dirs[sub_path.rpartition("/")[2]] = child
        dirs[sub_path] = child
        node = child
    return node


def recognize(
    files: Iterable[FileEntry],
    *,
    formats: Sequence[CheckpointFormat] | None = None,
    write_order_mtimes: bool = True,
) -> list[Found]:
    """Every checkpoint copy among ``files`` (paths relative to one location root), sorted by path.

    ``formats`` defaults to the registry (the sidecar format always enriches from the registry).
    Pass ``write_order_mtimes=False`` when the mtimes do not record the order in which the training
    job wrote the files -- an object store's LastModified is the upload time, and a plain
    ``cp``/``rsync`` without ``-t`` rewrites them -- so that checks comparing them (DCP's
    overwritten-save trap) do not fire on an honest copy.
    """
    formats = FORMATS if formats is None else sorted(formats, key=lambda fmt: fmt.priority)
    if not write_order_mtimes:
        files = (replace(entry, mtime=0.0) for entry in files)
    root = build_tree(files)
    views: list[DirView] = []
    try:
        return _recognize(root, formats, views)
    finally:
        # Directories point at their parents and parents at them: a cycle per directory, which only
        # the cyclic garbage collector would free, long after (a worker judging run directory after
        # run directory would grow with the inventory). Nothing returned refers to them: break them.
        for directory in (*_pre_order(root), *views):
            directory.parent = None
            directory.dirs = {}


def _recognize(root: DirView, formats: Sequence[CheckpointFormat], views: list[DirView]) -> list[Found]:

    # Unclaimed files per directory subtree, so "is everything below here claimed?" is O(1).
    remaining: dict[str, int] = {}
    for directory in _post_order(root):
        remaining[directory.path] = len(directory.files) + sum(remaining[s.path] for s in directory.dirs.values())
    total = dict(remaining)
    claimed: set[str] = set()

    def claim_files(paths: Iterable[str]) -> None:
        # Counted per parent directory first, then walked up once per directory, not once per file.
        per_parent: dict[str, int] = {}
        for path in paths:
            if path in claimed:
                continue
            claimed.add(path)
            parent = path.rpartition("/")[0]
            per_parent[parent] = per_parent.get(parent, 0) + 1
        for parent, count in per_parent.items():
            while True:
                remaining[parent] -= count
                if not parent:
                    break
                parent = parent.rpartition("/")[0]

    results: list[Found] = []
    stack = [root]
    while stack:
        directory = stack.pop()
        if remaining[directory.path] == 0:
            continue
        view = None
        for fmt in formats:
            if view is None:
                whole = remaining[directory.path] == total[directory.path]
                view = directory if whole else _unclaimed_view(directory, claimed, remaining, views)
            found = fmt.claim(view)
            if not found:
                continue
            results.extend(found)
            for copy in found:
                claim_files(copy.files)
            if any(copy.path == directory.path for copy in found) or not _has_own_unclaimed(directory, claimed):
                break
            view = None  # the next formats see only what is left
        # Children in reverse name order onto the stack, so they are visited in name order.
        for name in sorted(directory.dirs, reverse=True):
            sub = directory.dirs[name]
            if remaining[sub.path]:
                stack.append(sub)
    results.sort(key=lambda copy: copy.path)
    return results


def _post_order(root: DirView) -> list[DirView]:
    """Every directory, children before parents (iterative: no recursion limit on deep trees)."""
    order = _pre_order(root)
    order.reverse()
    return order


def _pre_order(root: DirView) -> list[DirView]:
    order, stack = [], [root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(node.dirs.values())
    return order


def _has_own_unclaimed(directory: DirView, claimed: set[str]) -> bool:
    return any(entry.path not in claimed for entry in directory.files.values())


def _unclaimed_view(
    directory: DirView, claimed: set[str], remaining: dict[str, int], views: list[DirView] | None = None
) -> DirView:
    """A copy of ``directory`` with only its unclaimed files and the subdirectories that still have
    some. Its ``parent`` is the real parent, so formats can still read tracker files there. Every
    view made is added to ``views``, so that the caller can break their cycles afterwards."""
    view = DirView(
        path=directory.path,
        parent=directory.parent,
        files={name: e for name, e in directory.files.items() if e.path not in claimed},
    )
    if views is not None:
        views.append(view)
    for name, sub in directory.dirs.items():
        if remaining[sub.path]:
            child = _unclaimed_view(sub, claimed, remaining, views)
            child.parent = view
            view.dirs[name] = child
    return view
