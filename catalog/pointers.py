"""Resume pointers: what the framework itself will resume from, compared with what the catalog judged.

A job that restarts does not ask this product which checkpoint to load: it follows its framework's own
pointer. Each framework's rule, from its own code:

- **DeepSpeed** ``engine.load_checkpoint(dir)`` with no tag reads ``<dir>/latest`` (the tag's name, written by
  rank 0 after every rank saved) and loads ``<dir>/<tag>/``; without ``latest`` it loads nothing.
- **Megatron-LM** (legacy and ``torch_dist``) reads ``<dir>/latest_checkpointed_iteration.txt`` (an iteration,
  or ``release``) and loads ``iter_{:07d}/`` (or ``release/``); without the tracker it starts from scratch.
- **Hugging Face Trainer** ``resume_from_checkpoint=True`` takes ``get_last_checkpoint(output_dir)``: the
  ``checkpoint-N`` folder with the largest N, whatever is inside it.
- **Orbax** ``CheckpointManager.latest_step()``: the largest finalized step folder (temporary ones excluded).
- **torchtitan** (PyTorch DCP) loads the largest ``step-N`` folder that holds a ``.metadata`` file.

For every run and every location holding its checkpoints, ``pointers_for_run`` reads that pointer (the agent
and the bucket scans report a pointer file's first bytes as the file's facts) and says: ok, points at a partial
or corrupt checkpoint, points at an older checkpoint than the newest complete one, missing, dangling, or
unreadable, with the exact fix: the file and the line to write, or the folder to move aside.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from django.db.models import CharField, F, Func, Q, Value, Window
from django.db.models.functions import Replace, RowNumber

from catalog.choices import CopyState, Verification
from catalog.formats.common import is_note_inferred, step_from_name
from catalog.models import CheckpointCopy, Run, ShardFile
from fleet.models import StorageLocation

POINTER_MAX_BYTES = 4096  # a pointer holds a name or a number; a bigger file is not one


class PointerState:
    OK = "ok"
    BAD_TARGET = "bad_target"  # points at a partial or corrupt checkpoint
    BEHIND = "behind"  # points at an older checkpoint than the newest complete one
    MISSING = "missing"
    DANGLING = "dangling"
    UNREADABLE = "unreadable"
    NOTHING = "nothing"  # no complete checkpoint at this location to point at

    LABELS = {
        OK: "Pointer OK",
        BAD_TARGET: "Points at a broken checkpoint",
        BEHIND: "Points at an older checkpoint",
        MISSING: "Pointer missing",
        DANGLING: "Pointer dangling",
        UNREADABLE: "Pointer unreadable",
        NOTHING: "Nothing complete to resume from here",
    }
    SEVERITY = {OK: 0, BEHIND: 1, NOTHING: 2, MISSING: 2, DANGLING: 3, UNREADABLE: 3, BAD_TARGET: 3}


@dataclass(frozen=True)
class Framework:
    key: str
    label: str
    pointer_file: str = ""  # "" : the framework picks a folder by its name (an implicit pointer)
    folder: re.Pattern = re.compile(r"^$")
    resume_hint: str = ""


FRAMEWORKS = {
    "deepspeed": Framework(
        "deepspeed",
        "DeepSpeed",
        "latest",
        re.compile(r"^.+$"),
        "engine.load_checkpoint(save_dir) reads `latest`",
    ),
    "megatron": Framework(
        "megatron",
        "Megatron-LM",
        "latest_checkpointed_iteration.txt",
        re.compile(r"^(iter_\d{7}|release)$"),
        "Megatron reads latest_checkpointed_iteration.txt",
    ),
    "hf_trainer": Framework(
        "hf_trainer",
        "Hugging Face Trainer",
        "",
        re.compile(r"^checkpoint-(\d+)$"),
        "trainer.train(resume_from_checkpoint=True) takes the checkpoint-N with the largest N",
    ),
    "orbax": Framework(
        "orbax",
        "Orbax",
        "",
        re.compile(r"^(?:[A-Za-z_]+_)?(\d+)$"),
        "CheckpointManager.latest_step() takes the largest finalized step",
    ),
    "pytorch_dcp": Framework(
        "pytorch_dcp",
        "torchtitan / PyTorch DCP",
        "",
        re.compile(r"^step-(\d+)$"),
        "torchtitan loads the largest step-N folder holding a .metadata",
    ),
}
FORMAT_FRAMEWORK = {
    "deepspeed": "deepspeed",
    "megatron": "megatron",
    "megatron_dist": "megatron",
    "hf_trainer": "hf_trainer",
    "orbax": "orbax",
    "pytorch_dcp": "pytorch_dcp",
}
TRUSTED = (Verification.VERIFIED, Verification.UNVERIFIED)


@dataclass
class Pointer:
    """The pointer of one framework's save folder at one location, judged."""

    run_id: int
    location_id: int
    location_name: str
    save_dir: str  # relative to the location root
    framework: str
    framework_label: str
    state: str
    detail: str
    pointer_path: str = ""  # relative path of the pointer file ("" for an implicit pointer)
    content: str = ""  # what it says
    target: PointedCopy | None = None  # the copy it resolves to
    newest: PointedCopy | None = None  # the newest complete, trusted copy in the folder
    fix: str = ""  # in words
    fix_command: str = ""  # the exact line to run
    evidence_at: object = None

    @property
    def ok(self) -> bool:
        return self.state == PointerState.OK

    @property
    def label(self) -> str:
        return PointerState.LABELS[self.state]

    @property
    def severity(self) -> int:
        return PointerState.SEVERITY[self.state]

    def as_dict(self) -> dict:
        def copy_data(c: PointedCopy | None):
            if c is None:
                return None
            return {
                "checkpoint": c.checkpoint_id,
                "copy": c.pk,
                "label": c.checkpoint.label,
                "path": c.path,
                "state": c.state,
                "verification": c.verification,
            }

        return {
            "location": self.location_id,
            "location_name": self.location_name,
            "save_dir": self.save_dir,
            "framework": self.framework,
            "state": self.state,
            "label": self.label,
            "detail": self.detail,
            "pointer_file": self.pointer_path or None,
            "content": self.content or None,
            "points_to": copy_data(self.target),
            "newest_complete": copy_data(self.newest),
            "fix": self.fix or None,
            "fix_command": self.fix_command or None,
        }


@dataclass
class _Folder:
    location: object
    save_dir: str
    framework: Framework
    copies: list[PointedCopy] = field(default_factory=list)
    # Read for every folder of the run at once (``_read_files``): its pointer file, and for torchtitan which of its
    # newest METADATA_BATCH step-N folders hold a .metadata.
    pointer_entry: ShardFile | None = None
    with_metadata: set[str] = field(default_factory=set)
    # Only its newest FOLDER_WINDOW copies were read (it has more).
    partial_read: bool = False


def _parent(path: str) -> tuple[str, str]:
    head, _, tail = path.rstrip("/").rpartition("/")
    return head, tail


def _join(*parts: str) -> str:
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


def where(location, relative: str) -> str:
    """Where ``relative`` is for a person: an absolute path on a host, an s3:// URL in a bucket."""
    bucket = getattr(location, "bucket", None) if location.host_id is None else None
    if bucket is not None:
        return f"s3://{bucket.bucket_name}/{_join(bucket.prefix, relative)}"
    return "/" + _join(location.root_path, relative) if location.root_path else relative


def _write_command(location, relative: str, line: str) -> str:
    target = where(location, relative)
    if target.startswith("s3://"):
        return f"printf '%s\\n' {shlex.quote(line)} | aws s3 cp - {shlex.quote(target)}"
    return f"printf '%s\\n' {shlex.quote(line)} > {shlex.quote(target)}"


def _step(copy: PointedCopy) -> int:
    step = copy.checkpoint.step
    if step is None:
        step = step_from_name(_parent(copy.path)[1])
    return step if step is not None else -1


def _good(copy: PointedCopy) -> bool:
    return copy.state == CopyState.COMPLETE and copy.verification in TRUSTED


def _newer_than_pointer_only(copy: PointedCopy, framework: Framework) -> bool:
    """Partial only because it is newer than the pointer file says (every file of it is there): a save cut off
    between the last rank's write and rank 0's pointer update, or a pointer rewound by hand."""
    reasons = [str(r) for r in (copy.reasons or []) if not is_note_inferred(str(r))]
    return (
        copy.state == CopyState.PARTIAL
        and copy.verification in TRUSTED
        and bool(reasons)
        and all("newer than" in r and framework.pointer_file in r for r in reasons)
    )


def _broken_words(copy: PointedCopy) -> str:
    if copy.state != CopyState.COMPLETE:
        why = "; ".join([str(r) for r in (copy.reasons or []) if not is_note_inferred(str(r))][:2])
        return f"{copy.get_state_display().lower()}{': ' + why if why else ''}"
    return f"its checksums {copy.get_verification_display().lower()}"


@dataclass(frozen=True)
class PointedCheckpoint:
    """What judging a pointer reads of a checkpoint."""

    pk: int
    step: int | None
    tag: str

    @property
    def label(self) -> str:  # as Checkpoint.label
        return f"step {self.step}" if self.step is not None else self.tag


@dataclass(frozen=True)
class PointedCopy:
    """What judging a pointer reads of a copy. A run of 5,000 checkpoints has ~10,000 present copies: they are read
    as plain rows (``values_list``), not model instances, which took ~150 ms of CPU for the largest run of
    bench/spend_bench.py's 10M-file fleet."""

    pk: int
    checkpoint_id: int
    location_id: int
    path: str
    format: str
    state: str
    verification: str
    reasons: list
    checkpoint: PointedCheckpoint

    def get_state_display(self) -> str:
        return str(CopyState(self.state).label)

    def get_verification_display(self) -> str:
        return str(Verification(self.verification).label)


def _folders(run: Run) -> list[_Folder]:
    return _folders_of([run.pk]).get(run.pk, [])


# How many of each save folder's newest copies are read to judge its pointer. The judgment needs the newest good
# copy, the copy the pointer names and those newer than it: nearly always among the newest few. A folder with more
# copies than this whose judgment needs an older one (no good copy among them, a pointer naming an older one, no
# step-N with a .metadata) is read again whole (``_whole``): bounded work for a run of 5,000 checkpoints, the same
# answer as reading every copy.
FOLDER_WINDOW = 64

_FOLDER_COLUMNS = (
    "checkpoint__run_id",
    "pk",
    "checkpoint_id",
    "location_id",
    "path",
    "format",
    "state",
    "verification",
    "reasons",
    "checkpoint__step",
    "checkpoint__tag",
)


def _save_dir_sql():
    """A copy's folder in SQL, as ``_parent`` has it (with a trailing slash): the path with its last part trimmed,
    ``rtrim(path, <every character of path but '/'>)``, which SQLite and PostgreSQL both evaluate."""
    return Func(F("path"), Replace(F("path"), Value("/"), Value("")), function="RTRIM", output_field=CharField())


def _copy_rows(where: Q, *, window: int | None):
    rows = CheckpointCopy.objects.filter(
        where, gone_at__isnull=True, temporary=False, format__in=list(FORMAT_FRAMEWORK)
    )
    if window is not None:
        rows = rows.annotate(
            newest_rank=Window(
                RowNumber(),
                partition_by=[F("checkpoint__run_id"), F("location_id"), _save_dir_sql(), F("format")],
                order_by=[F("checkpoint__step").desc(nulls_last=True), F("pk").desc()],
            )
        ).filter(newest_rank__lte=window)
    # In path order within a location: equal steps keep max()'s first-wins order, window or not.
    return rows.order_by("location_id", "path").values_list(*_FOLDER_COLUMNS)


def _build(rows, *, window: int | None) -> dict[tuple[int, int, str, str], _Folder]:
    folders: dict[tuple[int, int, str, str], _Folder] = {}
    read: dict[tuple[int, int, str, str], int] = {}
    for run_id, pk, checkpoint_id, location_id, path, fmt, state, verification, reasons, step, tag in rows:
        key = FORMAT_FRAMEWORK[fmt]
        save_dir, name = _parent(path)
        group = (run_id, location_id, save_dir, key)
        read[group] = read.get(group, 0) + 1
        framework = FRAMEWORKS[key]
        if not framework.folder.match(name):
            continue
        folder = folders.setdefault(group, _Folder(None, save_dir, framework))
        checkpoint = PointedCheckpoint(checkpoint_id, step, tag)
        folder.copies.append(
            PointedCopy(pk, checkpoint_id, location_id, path, fmt, state, verification, reasons or [], checkpoint)
        )
    if window is not None:
        for group, folder in folders.items():
            folder.partial_read = read[group] >= window
    return folders


def _folders_of(run_ids: list[int]) -> dict[int, list[_Folder]]:
    """The save folders of each of these runs, each with its newest FOLDER_WINDOW copies, in two queries (the copies
    as plain rows, the runs' few locations)."""
    window = FOLDER_WINDOW
    folders = _build(_copy_rows(Q(checkpoint__run_id__in=run_ids), window=window), window=window)
    locations = StorageLocation.objects.select_related("bucket", "host").in_bulk({k[1] for k in folders})
    by_run: dict[int, list[_Folder]] = {}
    for (run_id, location_id, _, _), folder in folders.items():
        folder.location = locations[location_id]
        by_run.setdefault(run_id, []).append(folder)
    return by_run


def _whole(run: Run, folder: _Folder) -> _Folder:
    """Every copy of ``folder``, read again when its newest ones did not settle its judgment."""
    rows = _copy_rows(
        Q(
            checkpoint__run_id=run.pk,
            location_id=folder.location.pk,  # type: ignore[attr-defined]
            path__startswith=f"{folder.save_dir}/" if folder.save_dir else "",
        ),
        window=None,
    )
    group = (run.pk, folder.location.pk, folder.save_dir, folder.framework.key)  # type: ignore[attr-defined]
    whole = _build(rows, window=None).get(group, folder)
    whole.location = folder.location
    _read_files([whole])
    return whole


def _needs_older(p: Pointer, folder: _Folder) -> bool:
    """Whether the judgment of a folder read only in part may change with its older copies: no good copy among the
    newest, a pointer naming none of them, or (torchtitan) none of them with a .metadata."""
    if not folder.partial_read:
        return False
    if p.newest is None or p.state == PointerState.DANGLING:
        return True
    return not folder.framework.pointer_file and p.target is None


def _newest_first(folder: _Folder) -> list[PointedCopy]:
    # A stable sort: equal steps keep max()'s first-wins order.
    return sorted(folder.copies, key=_step, reverse=True)


def _read_files(folders: list[_Folder]) -> None:
    """Every folder's pointer file, and the .metadata files of each torchtitan folder's newest METADATA_BATCH, in one
    query whatever the number of folders and checkpoints."""
    wanted = Q()
    for folder in folders:
        location = folder.location.pk  # type: ignore[attr-defined]
        if folder.framework.pointer_file:
            wanted |= Q(location_id=location, path=_join(folder.save_dir, folder.framework.pointer_file))
        elif folder.framework.key == "pytorch_dcp":
            paths = [_join(c.path, ".metadata") for c in _newest_first(folder)[:METADATA_BATCH]]
            wanted |= Q(location_id=location, path__in=paths)
    if not wanted:
        return
    found = {
        (f.location_id, f.path): f
        for f in ShardFile.objects.filter(wanted, gone_at__isnull=True).only("location_id", "path", "size", "facts")
    }
    for folder in folders:
        location = folder.location.pk  # type: ignore[attr-defined]
        if folder.framework.pointer_file:
            folder.pointer_entry = found.get((location, _join(folder.save_dir, folder.framework.pointer_file)))
        else:
            folder.with_metadata = {path for (loc, path) in found if loc == location}


def _named(folder: _Folder, name: str) -> PointedCopy | None:
    path = _join(folder.save_dir, name)
    return next((c for c in folder.copies if c.path.rstrip("/") == path), None)


def _target_name(framework: Framework, content: str) -> str | None:
    if framework.key == "megatron":
        if content == "release":
            return "release"
        return f"iter_{int(content):07d}" if content.isdigit() else None
    return content if content and "/" not in content and content not in (".", "..") else None


def _pointer_line(framework: Framework, copy: PointedCopy) -> str:
    name = _parent(copy.path)[1]
    if framework.key == "megatron":
        return "release" if name == "release" else str(int(name.removeprefix("iter_")))
    return name


# torchtitan's rule asks which folders hold a .metadata: asked of the newest folders first, this many at a time, so
# that a run of thousands of checkpoints is answered in one query (the newest folder nearly always has one).
METADATA_BATCH = 64


def _implicit_target(folder: _Folder) -> PointedCopy | None:
    if folder.framework.key != "pytorch_dcp":
        return max(folder.copies, key=_step, default=None)
    # The largest step-N holding a .metadata: the first of the newest-first order that has one. The newest batch was
    # read with every folder's files; an older batch is read only when none of the newest has one.
    newest_first = _newest_first(folder)
    for start in range(0, len(newest_first), METADATA_BATCH):
        batch = newest_first[start : start + METADATA_BATCH]
        if start == 0:
            with_metadata = folder.with_metadata
        else:
            with_metadata = set(
                ShardFile.objects.filter(
                    location=folder.location,
                    gone_at__isnull=True,
                    path__in=[_join(c.path, ".metadata") for c in batch],
                ).values_list("path", flat=True)
            )
        found = next((c for c in batch if _join(c.path, ".metadata") in with_metadata), None)
        if found is not None:
            return found
    return None


def _judge(run: Run, folder: _Folder) -> Pointer:
    fw = folder.framework
    newest = max((c for c in folder.copies if _good(c)), key=_step, default=None)
    p = Pointer(
        run_id=run.pk,
        location_id=folder.location.pk,
        location_name=folder.location.name,
        save_dir=folder.save_dir,
        framework=fw.key,
        framework_label=fw.label,
        state=PointerState.OK,
        detail="",
        newest=newest,
        evidence_at=folder.location.last_applied_at,
    )
    if fw.pointer_file:
        p.pointer_path = _join(folder.save_dir, fw.pointer_file)
        entry = folder.pointer_entry
        if entry is None:
            p.state = PointerState.MISSING
            folder_at = where(folder.location, folder.save_dir)
            p.detail = f"{fw.pointer_file} is not in {folder_at}: {fw.resume_hint}, so a restart loads nothing"
        elif entry.size > POINTER_MAX_BYTES:
            p.state = PointerState.UNREADABLE
            p.detail = f"{fw.pointer_file} is {entry.size:,} bytes: a pointer holds one name, so this is not one"
        else:
            facts = entry.facts or {}
            content = facts.get("content") if facts.get("kind") == "text" else None
            if not isinstance(content, str) or "error" in facts:
                why = facts.get("error") or "its content was not reported"
                p.state = PointerState.UNREADABLE
                p.detail = f"{fw.pointer_file} cannot be read: {why}"
            else:
                p.content = content.strip()
                name = _target_name(fw, p.content)
                p.target = _named(folder, name) if name else None
                if p.target is None:
                    p.state = PointerState.DANGLING
                    p.detail = f"{fw.pointer_file} says {p.content!r}, and no such checkpoint is in this folder"
    else:
        p.target = _implicit_target(folder)
        if p.target is not None:
            p.content = _parent(p.target.path)[1]
    if p.state == PointerState.OK and p.target is not None:
        if not _good(p.target):
            p.state = PointerState.BAD_TARGET
            p.detail = f"it resolves to {p.target.checkpoint.label}, which is {_broken_words(p.target)}"
        elif newest is not None and _step(p.target) < _step(newest):
            p.state = PointerState.BEHIND
            p.detail = (
                f"it resolves to {p.target.checkpoint.label}, but {newest.checkpoint.label} is newer and complete: "
                "a restart would throw that training away"
            )
        else:
            ahead = max(
                (c for c in folder.copies if _newer_than_pointer_only(c, fw) and _step(c) > _step(p.target)),
                key=_step,
                default=None,
            )
            if ahead is not None:
                p.state = PointerState.BEHIND
                p.detail = (
                    f"it names {p.target.checkpoint.label}, but {ahead.checkpoint.label} is newer and has every "
                    f"file its format asks for; it counts as partial only because {fw.pointer_file} was never "
                    "moved on to it "
                    "(the save was cut off before rank 0 wrote the pointer, or the pointer was rewound)"
                )
                p.fix = (
                    f"If {ahead.checkpoint.label} finished saving (check the job's log for that step's save), write "
                    f"{_pointer_line(fw, ahead)!r} to {where(folder.location, p.pointer_path)}; otherwise the pointer "
                    "is right."
                )
                p.fix_command = _write_command(folder.location, p.pointer_path, _pointer_line(fw, ahead))
                return p
            p.detail = f"a restart resumes from {p.target.checkpoint.label}, the newest complete checkpoint here"
    if p.state == PointerState.OK and p.target is None:
        p.state = PointerState.NOTHING
        p.detail = "no checkpoint folder here that the framework would pick"
    if newest is None and p.state != PointerState.OK:
        p.state = PointerState.NOTHING if p.state in (PointerState.MISSING, PointerState.BEHIND) else p.state
        p.fix = (
            "No complete checkpoint is in this folder: restore one from another copy (the recovery page ranks them)."
        )
        return p
    if p.state != PointerState.OK and newest is not None:
        _fix(p, folder, newest)
    return p


def _fix(p: Pointer, folder: _Folder, newest: PointedCopy) -> None:
    fw = folder.framework
    if fw.pointer_file:
        line = _pointer_line(fw, newest)
        at = where(folder.location, p.pointer_path)
        p.fix = f"Write {line!r} to {at} so that a restart loads {newest.checkpoint.label}."
        p.fix_command = _write_command(folder.location, p.pointer_path, line)
        return
    target = p.target
    newest_where = where(folder.location, newest.path)
    if target is not None and target.pk != newest.pk and not _good(target):
        aside = where(folder.location, target.path)
        p.fix = (
            f"Move the broken {_parent(target.path)[1]} aside so that the framework picks {newest.checkpoint.label}, "
            f"or resume from {newest_where} explicitly."
        )
        p.fix_command = (
            f"mv {shlex.quote(aside)} {shlex.quote(aside + '.broken')}" if not aside.startswith("s3://") else ""
        )
        return
    p.fix = f"Resume from {newest_where} explicitly ({fw.resume_hint})."


def _judge_settled(run: Run, folder: _Folder) -> Pointer:
    p = _judge(run, folder)
    return _judge(run, _whole(run, folder)) if _needs_older(p, folder) else p


def pointers_for_run(run: Run) -> list[Pointer]:
    """Every framework pointer of ``run``'s save folders, worst first."""
    folders = _folders(run)
    _read_files(folders)
    found = [_judge_settled(run, folder) for folder in folders]
    return sorted(found, key=lambda p: (-p.severity, p.location_name, p.save_dir))


def pointers_for_runs(runs) -> dict[int, list[Pointer]]:
    """``pointers_for_run`` for many runs in a fixed number of queries (their copies, their locations, the pointer
    and .metadata files), for the fleet-wide problems list: ``{run id: pointers, worst first}``. A folder with more
    than FOLDER_WINDOW copies whose newest do not settle its judgment costs two more (``_whole``)."""
    by_id = {run.pk: run for run in runs}
    if not by_id:
        return {}
    folders = _folders_of(list(by_id))
    _read_files([f for fs in folders.values() for f in fs])
    result: dict[int, list[Pointer]] = {}
    for pk, run in by_id.items():
        found = [_judge_settled(run, folder) for folder in folders.get(pk, [])]
        result[pk] = sorted(found, key=lambda p: (-p.severity, p.location_name, p.save_dir))
    return result
