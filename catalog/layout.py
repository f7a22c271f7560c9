"""Where things are below a location root: the path template that names teams and runs, a run directory's
subtree, and its present files as the recognisers read them. Shared by the catalog's writes and verification."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection
from django.db.models import Q

from catalog.formats.base import FileEntry
from catalog.models import ShardFile
from fleet.models import StorageLocation

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


def subtree(prefix: str) -> Q:
    """Every path strictly below directory ``prefix`` (bytewise, so it is one index range)."""
    if not prefix:
        return Q()
    return Q(path__gte=prefix + "/", path__lt=prefix + "0")  # '0' is the byte after '/'


def group_files(
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
        columns = (
            "id, copy_id, path, size, extract(epoch FROM mtime)::float8, facts::text, checksum, checksum_algo, "
            "digests::text, first_checksum::text"
        )
    else:
        columns = "id, copy_id, path, size, mtime, facts, checksum, checksum_algo, digests, first_checksum"
    table = ShardFile._meta.db_table
    sql = f"SELECT {columns} FROM {table} WHERE {' AND '.join(where)}"  # noqa: S608 - fixed names
    epoch = sqlite_epoch if connection.vendor != "postgresql" else float
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        while rows := cursor.fetchmany(5000):
            for pk, copy_id, path, size, mtime, facts, checksum, algo, digests, first in rows:
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
                    digests=digests or None,
                    first=first or None,
                )
                yield pk, copy_id, entry


def sqlite_epoch(value) -> float:
    """SQLite hands back Django's stored text ('YYYY-MM-DD HH:MM:SS[.ffffff]', UTC)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC).timestamp() if value.tzinfo is None else value.timestamp()
    return datetime.fromisoformat(value).replace(tzinfo=UTC).timestamp()
