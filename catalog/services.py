"""Writes of the catalog: turning a location's shard files into runs, checkpoints and judged copies."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from catalog.choices import Importance
from catalog.formats.base import FileEntry, Found
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
from catalog.verification import FileFacts, carried_over, checkpoints_verify, relative_checksums
from fleet.models import Inventory, StorageLocation

UNASSIGNED_TEAM = "unassigned"
# Verification runs after this many files have been judged (and at the end), so memory stays bounded.
VERIFY_EVERY_FILES = 20_000
_TEMPLATE_PART = re.compile(r"^\{(team|run|any)\}$|^\*$")


@dataclass(frozen=True)
class PathTemplate:
    """How teams and runs are laid out below a location root, e.g. ``{team}/{run}`` or ``prod/{run}``."""

    parts: tuple[str, ...]

    @classmethod
    def parse(cls, template: str) -> PathTemplate:
        parts = tuple(p for p in template.strip("/").split("/") if p)
        if "{run}" not in parts:
            raise ValueError("the path template must contain {run}")
        return cls(parts)

    @property
    def depth(self) -> int:
        """How many leading path components name the run directory."""
        return self.parts.index("{run}") + 1

    def match(self, path: str) -> dict[str, str] | None:
        """The team and run a path below the root belongs to, if it is a run directory or lies inside one."""
        comps = path.split("/")
        if len(comps) < self.depth:
            return None
        found: dict[str, str] = {}
        for part, comp in zip(self.parts[: self.depth], comps, strict=False):
            if part in ("{team}", "{run}"):
                found[part[1:-1]] = comp
            elif part in ("{any}", "*"):
                continue
            elif part != comp:
                return None
        return found

    def group_of(self, path: str) -> str:
        """The directory whose subtree is recognised together: the run directory, when the path has one."""
        comps = path.split("/")
        if len(comps) > self.depth:
            return "/".join(comps[: self.depth])
        return "/".join(comps[:-1])


def _subtree(prefix: str) -> Q:
    """Every path strictly below directory ``prefix`` (bytewise, so it is one index range)."""
    if not prefix:
        return Q()
    return Q(path__gte=prefix + "/", path__lt=prefix + "0")  # '0' is the byte after '/'


def _affected_groups(location: StorageLocation, template: PathTemplate, inventory: Inventory | None) -> list[str]:
    files = ShardFile.objects.filter(location=location)
    if inventory is not None:
        files = files.filter(changed_by=inventory)
    groups: set[str] = set()
    for path in files.values_list("path", flat=True).iterator(chunk_size=5000):
        groups.add(template.group_of(path))
    return sorted(groups)


def _group_files(
    location: StorageLocation, template: PathTemplate, group: str
) -> Iterator[tuple[int, int | None, FileEntry]]:
    """The present files of one run directory, read with a plain cursor.

    This is the hottest read of ingestion (every file of every touched run): the ORM's per-row
    datetime and JSON conversion cost about as much as the query, so mtime comes back as epoch
    seconds and facts are decoded only where present (they are on manifests alone).
    """
    depth = len(group.split("/")) if group else 0
    shallow = depth < template.depth
    where = ["location_id = %s", "gone_at IS NULL"]
    params: list = [location.pk]
    if group:
        where.append("path >= %s AND path < %s")
        params += [group + "/", group + "0"]  # '0' is the byte after '/': the subtree is one range
    if connection.vendor == "postgresql":
        columns = "id, copy_id, path, size, extract(epoch FROM mtime)::float8, facts::text, checksum, checksum_algo"
    else:
        columns = "id, copy_id, path, size, mtime, facts, checksum, checksum_algo"
    table = ShardFile._meta.db_table
    sql = f"SELECT {columns} FROM {table} WHERE {' AND '.join(where)}"  # noqa: S608 - fixed names
    epoch = _sqlite_epoch if connection.vendor != "postgresql" else float
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        while rows := cursor.fetchmany(5000):
            for pk, copy_id, path, size, mtime, facts, checksum, algo in rows:
                # A group shallower than a run directory holds only its own direct files.
                if shallow and template.group_of(path) != group:
                    continue
                entry = FileEntry(
                    path=path,
                    size=size,
                    mtime=epoch(mtime),
                    facts=json.loads(facts) if facts else None,
                    checksum=checksum or None,
                    checksum_algo=algo or None,
                )
                yield pk, copy_id, entry


def _sqlite_epoch(value) -> float:
    """SQLite hands back Django's stored text ('YYYY-MM-DD HH:MM:SS[.ffffff]', UTC)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC).timestamp() if value.tzinfo is None else value.timestamp()
    return datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp()


def _team_and_run(location: StorageLocation, template: PathTemplate, found: Found, teams: dict, runs: dict) -> Run:
    matched = template.match(found.path) or {}
    team_name = (
        found.team
        or matched.get("team")
        or (location.default_team.name if location.default_team_id else UNASSIGNED_TEAM)
    )
    run_name = found.run or matched.get("run")
    if not run_name:
        parent = found.path.rsplit("/", 1)[0] if "/" in found.path else ""
        run_name = parent.rsplit("/", 1)[-1] if parent else location.name
    team = teams.get(team_name)
    if team is None:
        team, _ = Team.objects.get_or_create(name=team_name)
        teams[team_name] = team
    key = (team.pk, run_name)
    run = runs.get(key)
    if run is None:
        run, _ = Run.objects.get_or_create(team=team, name=run_name)
        runs[key] = run
    return run


def _update_copy_links(targets: dict[int | None, list[int]]) -> None:
    for copy_id, ids in targets.items():
        for i in range(0, len(ids), 1000):
            ShardFile.objects.filter(pk__in=ids[i : i + 1000]).update(copy_id=copy_id)


@dataclass(slots=True)
class GroupFile:
    """One present file of a run directory, as recognition sees it, and the copy it is linked to now."""

    entry: FileEntry
    stored: bool  # a catalog_shardfile row exists for it (False: the ingest is about to insert it)
    copy_id: int | None = None


CheckpointKey = tuple[int, int | None, str]  # (run id, step, tag): the tag only tells step-less ones apart


class Judge:
    """Judges a location's run directories one at a time and writes their copies, in bulk per directory.

    ``group`` recognises one run directory and returns the copy each of its files belongs to; the
    caller writes those links (into new rows or onto existing ones) and then calls ``verify``, which
    verifies every checkpoint judged since the last call. Member files of the copies judged here are
    handed to verification from memory, so they are not read back. Memory is bounded by what the
    caller holds between two ``verify`` calls.
    """

    def __init__(self, location: StorageLocation, *, now: datetime | None = None) -> None:
        self.location = location
        self.template = PathTemplate.parse(location.path_template)
        self.now = now or timezone.now()
        self.teams: dict[str, Team] = {}
        self.runs: dict[tuple[int, str], Run] = {}
        self.found = 0  # copies present in the directories judged
        # A location with no copy yet (its first inventory) needs no lookup of existing ones per directory.
        self.has_copies = CheckpointCopy.objects.filter(location=location).exists()
        self.pending_files = 0
        self._judged: dict[int, tuple[str, list[str]]] = {}  # the formats' verdict on each copy
        self._touched: set[int] = set()  # checkpoints whose copies were judged, to verify
        self._known: dict[int, dict[str, tuple[str, FileFacts]]] = {}  # member files of copies judged here

    def _existing(self, group: str) -> dict[str, CheckpointCopy]:
        if not self.has_copies:
            return {}
        copies = CheckpointCopy.objects.filter(location=self.location)
        if group:
            copies = copies.filter(Q(path=group) | _subtree(group))
        existing = {c.path: c for c in copies}
        if group and len(group.split("/")) < self.template.depth:
            existing = {p: c for p, c in existing.items() if self.template.group_of(p) == group}
        return existing

    def _checkpoints(self, found: list[Found]) -> list[Checkpoint]:
        """The checkpoint of each found copy, created where missing: a few queries per directory, not per copy."""
        keys: list[CheckpointKey] = []
        for f in found:
            run = _team_and_run(self.location, self.template, f, self.teams, self.runs)
            if f.step is not None:
                keys.append((run.pk, f.step, ""))
            else:
                keys.append((run.pk, None, f.path.rsplit("/", 1)[-1] or self.location.name))
        wanted = set(keys)
        known = self._load_checkpoints(wanted)
        missing = [k for k in dict.fromkeys(keys) if k not in known]
        if missing:
            # Another location's ingest may create the same checkpoint meanwhile: skip conflicts, read back.
            Checkpoint.objects.bulk_create(
                [Checkpoint(run_id=run_id, step=step, tag=tag) for run_id, step, tag in missing],
                ignore_conflicts=True,
            )
            known.update(self._load_checkpoints(set(missing)))
        return [known[k] for k in keys]

    @staticmethod
    def _load_checkpoints(keys: set[CheckpointKey]) -> dict[CheckpointKey, Checkpoint]:
        steps: dict[int, set[int]] = {}
        tags: dict[int, set[str]] = {}
        for run_id, step, tag in keys:
            if step is not None:
                steps.setdefault(run_id, set()).add(step)
            else:
                tags.setdefault(run_id, set()).add(tag)
        q = Q(pk__in=[])
        for run_id, values in steps.items():
            q |= Q(run_id=run_id, step__in=sorted(values))
        for run_id, values in tags.items():
            q |= Q(run_id=run_id, step__isnull=True, tag__in=sorted(values))
        out: dict[CheckpointKey, Checkpoint] = {}
        for c in Checkpoint.objects.filter(q):
            key = (c.run_id, c.step, "") if c.step is not None else (c.run_id, None, c.tag)
            if key in keys:
                out[key] = c
        return out

    def group(self, group: str, entries: list[FileEntry], found: list[Found] | None = None) -> dict[str, int | None]:
        """Recognise the present files of one run directory and write its copies; returns {path: copy id}
        for the files a copy claims. Copies of the location in this directory no longer found are marked gone.
        ``found`` is ``recognize(entries)`` when the caller has already recognised them (it is pure).
        """
        from catalog.recognition import recognize

        now = self.now
        if found is None:
            found = recognize(entries)
        by_path = {e.path: e for e in entries}
        existing = self._existing(group)
        checkpoints = self._checkpoints(found) if found else []
        targets: dict[str, int | None] = {}
        created: list[tuple[CheckpointCopy, Found]] = []
        kept: list[tuple[CheckpointCopy, Found]] = []
        seen_paths: set[str] = set()
        for f, checkpoint in zip(found, checkpoints, strict=True):
            if f.importance in Importance.values and checkpoint.importance != f.importance:
                checkpoint.importance = f.importance
                checkpoint.save(update_fields=["importance"])
            members = [by_path[p] for p in f.files if p in by_path]
            newest = max((m.mtime for m in members), default=None)
            values = {
                "checkpoint_id": checkpoint.pk,
                "format": f.format,
                "state": f.state,
                "reasons": list(f.reasons),
                "temporary": f.temporary,
                "file_count": len(members),
                "bytes": sum(m.size for m in members),
                "expected_files": f.expected_files,
                "expected_bytes": f.expected_bytes,
                "newest_mtime": datetime.fromtimestamp(newest, UTC) if newest is not None else None,
                "reference_checksums": relative_checksums(f.path, f.reference_checksums),
                "gone_at": None,
            }
            copy = existing.get(f.path)
            if copy is None:
                created.append((CheckpointCopy(location=self.location, path=f.path, judged_at=now, **values), f))
            else:
                self._touched.add(copy.checkpoint_id)  # the one it belonged to, should the copy move to another
                values["state"], values["reasons"] = carried_over(copy, f.state, values["reasons"])
                changed = [k for k, v in values.items() if getattr(copy, k) != v]
                if changed:
                    for k in changed:
                        setattr(copy, k, values[k])
                    copy.judged_at = now
                    copy.save(update_fields=[*changed, "judged_at"])
                kept.append((copy, f))
            seen_paths.add(f.path)
        if created:
            CheckpointCopy.objects.bulk_create([c for c, _ in created])
        for copy, f in (*kept, *created):
            self._judged[copy.pk] = (f.state, list(f.reasons))
            self._touched.add(copy.checkpoint_id)
            members = self._known.setdefault(copy.pk, {})
            for p in f.files:
                entry = by_path.get(p)
                if entry is not None:
                    targets[p] = copy.pk
                    members[p] = (p, FileFacts(entry.size, entry.checksum_algo or "", entry.checksum or ""))
            self.found += 1
        vanished = [c for p, c in existing.items() if p not in seen_paths and c.gone_at is None]
        if vanished:
            CheckpointCopy.objects.filter(pk__in=[c.pk for c in vanished]).update(gone_at=now, file_count=0, bytes=0)
            self._touched.update(c.checkpoint_id for c in vanished)
        self.pending_files += len(entries)
        return targets

    def verify(self) -> int:
        """Verify the checkpoints judged since the last call (their links must be written by now)."""
        written = 0
        if self._touched:
            written = checkpoints_verify(self._touched, judged=self._judged, known=self._known)
        self._judged, self._touched, self._known = {}, set(), {}
        self.pending_files = 0
        return written


def location_recognize(*, location: StorageLocation, inventory: Inventory | None = None) -> int:
    """Re-judge the checkpoints in every run directory the inventory touched; all of them without one.

    Returns how many checkpoint copies are present in the groups looked at. Runs inside the caller's
    transaction over the stored shard files, one run directory at a time, relinking only the files
    whose copy changed; verification runs every few thousand files, so memory stays bounded.
    (An ingest judges the staged rows instead, before it writes them: ``fleet.ingest``.)
    """
    judge = Judge(location)
    template = judge.template
    for group in _affected_groups(location, template, inventory):
        files: list[GroupFile] = []
        ids: dict[str, int] = {}
        for pk, copy_id, entry in _group_files(location, template, group):
            files.append(GroupFile(entry, True, copy_id))
            ids[entry.path] = pk
        targets = judge.group(group, [f.entry for f in files])
        moves: dict[int | None, list[int]] = {}
        for f in files:
            target = targets.get(f.entry.path)
            if f.copy_id != target:
                moves.setdefault(target, []).append(ids[f.entry.path])
        _update_copy_links(moves)
        if judge.pending_files >= VERIFY_EVERY_FILES:
            judge.verify()
    judge.verify()
    return judge.found
