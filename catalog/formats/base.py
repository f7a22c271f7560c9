"""The interface every checkpoint format implements.

Recognition is a pure function of an inventory: it sees the files below one storage location (their
paths, sizes, mtimes, checksums and the small facts the agent or scanner read from manifest files)
and says which directories or files are checkpoints, in which format, at which step, and whether
each copy is complete, partial or corrupt, with the reasons. It never touches the database or the
storage, so every format is testable from a list of ``FileEntry`` values.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

COMPLETE = "complete"
PARTIAL = "partial"
CORRUPT = "corrupt"


@dataclass(slots=True)
class FileEntry:
    """One file as an inventory reported it. ``path`` is relative to the location root, '/'-separated.

    Treat it as read-only. It is not frozen because a frozen dataclass is built five times slower, and an
    ingest builds one per file.
    """

    path: str
    size: int
    mtime: float = 0.0
    facts: dict[str, Any] | None = None
    checksum: str | None = None
    checksum_algo: str | None = None
    digests: str | None = None  # the stored text of its other checksums (catalog.digests), or None
    first: str | None = None  # the stored text of ShardFile.first_checksum, or None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(eq=False)
class DirView:
    """A directory of the inventory: its own files and subdirectories, and a link to its parent."""

    path: str  # '' for the location root, else 'a/b' (no trailing slash)
    parent: DirView | None = None
    files: dict[str, FileEntry] = field(default_factory=dict)
    dirs: dict[str, DirView] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def child_path(self, name: str) -> str:
        return f"{self.path}/{name}" if self.path else name

    def walk_files(self) -> Iterator[FileEntry]:
        """Every file in this directory and below it."""
        yield from self.files.values()
        for sub in self.dirs.values():
            yield from sub.walk_files()

    def walk_dirs(self) -> Iterator[DirView]:
        """This directory and every directory below it, parents before children."""
        yield self
        for sub in self.dirs.values():
            yield from sub.walk_dirs()


@dataclass
class Found:
    """One copy of one checkpoint as recognised at a location.

    ``path`` is the checkpoint directory (or, for single-file formats, the file) relative to the
    location root. ``files`` are the paths (relative to the root) of every file that belongs to
    this copy. ``reasons`` say, in words an operator understands, why the copy is partial or
    corrupt (and may note facts about a complete one).
    """

    path: str
    format: str
    step: int | None
    state: str = COMPLETE
    reasons: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    temporary: bool = False  # a left-over directory of an interrupted save
    expected_files: int | None = None
    expected_bytes: int | None = None
    # Hints a sidecar manifest (ckptfleet.json) gives; None when unknown.
    run: str | None = None
    team: str | None = None
    importance: str | None = None
    # The run's status as the job said it in its sidecar (catalog.lifecycle.JOB_STATUSES), why, and when the
    # sidecar was written (its mtime, seconds since the epoch): a later word of an operator wins over it.
    status: str | None = None
    status_reason: str = ""
    status_at: float | None = None
    # GPUs the job trains on (sidecar ``gpus``) and the checkpoint it started from (sidecar ``parent``:
    # {"team"?, "run", "step"}); None when the sidecar says nothing (catalog.recovery_point, catalog.lineage).
    gpus: int | None = None
    parent: dict | None = None
    # When the job finished the save, as its sidecar says (``saved_at``, seconds since the epoch); None: unknown, and
    # the files' times stand for it (``catalog.ages``).
    saved_at: float | None = None
    # Checksums a writer recorded for member files: {relative path below the root: (algo, hexdigest)}.
    reference_checksums: dict[str, tuple[str, str]] = field(default_factory=dict)

    def fail(self, state: str, reason: str) -> None:
        """Record a problem; corrupt outranks partial, which outranks complete."""
        rank = {COMPLETE: 0, PARTIAL: 1, CORRUPT: 2}
        if rank[state] > rank[self.state]:
            self.state = state
        self.reasons.append(reason)


class CheckpointFormat:
    """One checkpoint format. Subclass it in its own module under ``catalog/formats/``.

    ``claim`` is called for every directory of the inventory, parents before children, that no
    format has claimed yet (formats are tried in ``priority`` order, lowest first). It returns the
    copies it recognises *at* that directory: usually none, or one for the directory itself; a
    single-file format may return one per file in the directory. Files that a returned copy lists
    in ``files`` are not offered to other formats, and a directory whose every file is claimed is
    not descended into.
    """

    name: ClassVar[str]
    # Human-readable name for pages and choices; optional (added after the first version, defaults to name).
    label: ClassVar[str] = ""
    priority: ClassVar[int] = 100

    def claim(self, directory: DirView) -> list[Found]:
        raise NotImplementedError
