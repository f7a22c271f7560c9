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
from catalog.verification import carried_over, checkpoints_verify, relative_checksums
from fleet.models import Inventory, StorageLocation

UNASSIGNED_TEAM = "unassigned"
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


def location_recognize(*, location: StorageLocation, inventory: Inventory | None = None) -> int:
    """Re-judge the checkpoints in every run directory the inventory touched; all of them without one.

    Returns how many checkpoint copies are present in the groups looked at. Runs inside the
    ingest transaction, one run directory at a time, so memory is bounded by the largest run.
    """
    from catalog.recognition import recognize

    template = PathTemplate.parse(location.path_template)
    teams: dict[str, Team] = {}
    runs: dict[tuple[int, str], Run] = {}
    now = timezone.now()
    found_total = 0
    judged: dict[int, tuple[str, list[str]]] = {}  # the formats' verdict on each copy, for verification
    touched: set[int] = set()  # checkpoints whose copies were judged here, to verify afterwards
    for group in _affected_groups(location, template, inventory):
        current: dict[int, int | None] = {}
        entries: list[FileEntry] = []
        ids_by_path: dict[str, int] = {}
        for pk, copy_id, entry in _group_files(location, template, group):
            current[pk] = copy_id
            entries.append(entry)
            ids_by_path[entry.path] = pk
        found = recognize(entries)
        by_path = {e.path: e for e in entries}
        existing = {
            c.path: c
            for c in CheckpointCopy.objects.filter(location=location)
            .filter(Q(path=group) | _subtree(group) if group else Q())
            .select_related("checkpoint")
        }
        if group and len(group.split("/")) < template.depth:
            existing = {p: c for p, c in existing.items() if template.group_of(p) == group}
        wanted: dict[int, int | None] = dict.fromkeys(current)
        seen_paths: set[str] = set()
        for f in found:
            run = _team_and_run(location, template, f, teams, runs)
            if f.step is not None:
                checkpoint, _ = Checkpoint.objects.get_or_create(run=run, step=f.step)
            else:
                tag = f.path.rsplit("/", 1)[-1] or location.name
                checkpoint, _ = Checkpoint.objects.get_or_create(run=run, step=None, tag=tag)
            if f.importance in Importance.values and checkpoint.importance != f.importance:
                checkpoint.importance = f.importance
                checkpoint.save(update_fields=["importance"])
            members = [by_path[p] for p in f.files if p in by_path]
            newest = max((m.mtime for m in members), default=None)
            values = {
                "checkpoint": checkpoint,
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
                copy = CheckpointCopy.objects.create(location=location, path=f.path, judged_at=now, **values)
            else:
                touched.add(copy.checkpoint_id)  # the one it belonged to, should the copy move to another
                values["state"], values["reasons"] = carried_over(copy, f.state, values["reasons"])
                changed = [k for k, v in values.items() if getattr(copy, k) != v]
                if changed:
                    for k in changed:
                        setattr(copy, k, values[k])
                    copy.judged_at = now
                    copy.save(update_fields=[*changed, "judged_at"])
            seen_paths.add(f.path)
            judged[copy.pk] = (f.state, list(f.reasons))
            touched.add(checkpoint.pk)
            for p in f.files:
                if p in ids_by_path:
                    wanted[ids_by_path[p]] = copy.pk
            found_total += 1
        vanished = [c.pk for p, c in existing.items() if p not in seen_paths and c.gone_at is None]
        if vanished:
            CheckpointCopy.objects.filter(pk__in=vanished).update(gone_at=now, file_count=0, bytes=0)
            touched.update(c.checkpoint_id for p, c in existing.items() if p not in seen_paths and c.gone_at is None)
        moves: dict[int | None, list[int]] = {}
        for pk, target in wanted.items():
            if current[pk] != target:
                moves.setdefault(target, []).append(pk)
        _update_copy_links(moves)
    checkpoints_verify(touched, judged=judged)
    return found_total
