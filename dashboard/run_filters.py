"""The runs list's filters, sort orders and keyset pages, shared by the page and the API (they list the same runs).

Parameters (all optional): ``q`` (part of a run or team name), ``team`` (id), ``status``
(active/finished/deleted); where the run's bytes are (``Place``): ``tier`` (runs with a present copy holding
bytes on that tier), ``host`` (id), ``location`` (id), ``bucket`` (a bucket's name, any prefix) and
``storage_class`` (e.g. ``GLACIER``), all met by the same present copy;
``flag`` (runs with a checkpoint raising that placement flag), ``attention=1`` (runs with a partial
or corrupt present copy) and ``sort`` (one of ``SORTS``). Unknown values are ignored, never an error
page: a filter link pasted from an older version still opens the list. The one exception is a team id
the person may not choose (another team's, for a person scoped to theirs, or no team's): that is
refused as not found (``team_refusal``), so a scoped person learns nothing of other teams.

**Pages are keyset pages** (``RunFilters.page``): a ``cursor`` carries the sort, the sort key of the
row it points at and its id, and the direction, so a page is "the next 50 runs after this one in
this order", whatever the depth, and a bookmarked link opens the same place even after runs were
added before it. The run ids of a page are found first (from the sort key alone); only the page's
runs are then counted up (checkpoints, copies, bytes...), so the list costs the same at any fleet size
for the name sorts, and one grouped pass over present copies for the sorts by a count or a sum.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from urllib.parse import urlencode

from django.db.models import BigIntegerField, Count, Exists, F, Max, OuterRef, Q, QuerySet, Sum, Value
from django.db.models.functions import Coalesce

from catalog import selectors
from catalog.choices import CopyState, RunStatus
from catalog.models import CopyTierUsage, Run
from ckptfleet.errors import DomainError
from ckptfleet.params import lenient_id
from fleet.choices import Tier
from spend import placement

PAGE_SIZE = 50

SORTS = {
    "team": ("Team, then run", ("team__name", "name", "pk")),
    "name": ("Run name", ("name", "team__name", "pk")),
    "bytes": ("Most bytes first", (F("bytes").desc(nulls_last=True), "team__name", "name", "pk")),
    "newest": ("Newest step first", (F("newest_step").desc(nulls_last=True), "team__name", "name", "pk")),
    "attention": ("Most needing attention first", ("-bad_copies", "team__name", "name", "pk")),
    "checkpoints": ("Most checkpoints first", ("-checkpoint_count", "team__name", "name", "pk")),
}

_PRESENT = selectors.RUN_KEPT  # present copies, left-overs of interrupted saves not counted
_INT = BigIntegerField()
_TEAM = ("k_team", F("team__name"), False)
_NAME = ("k_name", F("name"), False)
# The keyset of each sort: (alias, expression, descending), then the run id ascending. The same order
# as ``SORTS``: a missing sum or step (no present copy) is -1 here, so it sorts last as NULLS LAST does.
KEYS: dict[str, tuple[tuple[str, object, bool], ...]] = {
    "team": (_TEAM, _NAME),
    "name": (_NAME, _TEAM),
    "bytes": (
        ("k_bytes", Coalesce(Sum("checkpoints__copies__bytes", filter=_PRESENT), Value(-1), output_field=_INT), True),
        _TEAM,
        _NAME,
    ),
    "newest": (
        ("k_newest", Coalesce(Max("checkpoints__step", filter=_PRESENT), Value(-1), output_field=_INT), True),
        _TEAM,
        _NAME,
    ),
    "attention": (
        (
            "k_bad",
            Count("checkpoints__copies", filter=_PRESENT & ~Q(checkpoints__copies__state=CopyState.COMPLETE)),
            True,
        ),
        _TEAM,
        _NAME,
    ),
    "checkpoints": (("k_checkpoints", Count("checkpoints", filter=_PRESENT, distinct=True), True), _TEAM, _NAME),
}


STORAGE_CLASS = re.compile(r"[A-Z0-9_]{1,32}")


@dataclass(frozen=True)
class Place:
    """Where a run's or checkpoint's bytes are: a tier, host, location, bucket (by name) and storage class, each
    optional. Read from ``CopyTierUsage``, the current bytes of every present copy per tier and storage class
    that the ingest keeps in step with each inventory, so the filter is one indexed subquery."""

    tier: str = ""
    host_id: int | None = None
    location_id: int | None = None
    bucket: str = ""
    storage_class: str = ""

    @classmethod
    def from_params(cls, params) -> Place:
        tier = (params.get("tier") or "").strip()
        storage_class = (params.get("storage_class") or "").strip().upper()
        return cls(
            tier=tier if tier in Tier.values else "",
            host_id=lenient_id((params.get("host") or "").strip()),
            location_id=lenient_id((params.get("location") or "").strip()),
            bucket=(params.get("bucket") or "").strip()[:63],
            storage_class=storage_class if STORAGE_CLASS.fullmatch(storage_class) else "",
        )

    def __bool__(self) -> bool:
        return bool(self.tier or self.host_id or self.location_id or self.bucket or self.storage_class)

    def usage(self) -> QuerySet[CopyTierUsage]:
        """The tier usage rows of present copies (not left-overs) that hold bytes at this place."""
        rows = CopyTierUsage.objects.filter(copy__gone_at__isnull=True, copy__temporary=False, bytes__gt=0)
        if self.tier:
            rows = rows.filter(tier=self.tier)
        if self.host_id is not None:
            rows = rows.filter(location__host_id=self.host_id)
        if self.location_id is not None:
            rows = rows.filter(location_id=self.location_id)
        if self.bucket:
            rows = rows.filter(location__bucket__bucket_name=self.bucket)
        if self.storage_class:
            rows = rows.filter(storage_class=self.storage_class)
        return rows

    def params(self) -> dict[str, str | int]:
        return {
            "tier": self.tier,
            "host": self.host_id or "",
            "location": self.location_id or "",
            "bucket": self.bucket,
            "storage_class": self.storage_class,
        }


class BadCursor(ValueError):
    """A cursor that is not one this list wrote, or was written for another sort."""


@dataclass(frozen=True)
class Cursor:
    """A place in the list: the sort, the sort key and id of one run, and which way to read from it."""

    sort: str
    key: tuple
    pk: int
    backward: bool = False

    def encode(self) -> str:
        data = {"s": self.sort, "k": list(self.key), "id": self.pk, "d": "prev" if self.backward else "next"}
        raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str, *, sort: str) -> Cursor:
        try:
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            cursor = cls(sort=data["s"], key=tuple(data["k"]), pk=data["id"], backward=data["d"] == "prev")
        except (binascii.Error, ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
            raise BadCursor("not a cursor of the runs list") from exc
        if cursor.sort != sort:
            raise BadCursor(f"the cursor is for the sort {cursor.sort!r}, not {sort!r}")
        kinds = [int if desc else str for _, _, desc in KEYS[sort]]
        if (
            type(cursor.pk) is not int
            or len(cursor.key) != len(kinds)
            or any(type(v) is not t for v, t in zip(cursor.key, kinds, strict=True))
        ):
            raise BadCursor("the cursor does not match the sort")
        return cursor


@dataclass
class RunPage:
    """One keyset page of runs, counted up, with the cursors of the pages around it."""

    runs: list[Run]
    count: int  # runs matching the filters
    before: int  # matching runs ahead of this page
    size: int
    next: Cursor | None = None
    previous: Cursor | None = None

    @property
    def start_index(self) -> int:
        return self.before + 1 if self.runs else self.before

    @property
    def end_index(self) -> int:
        return self.before + len(self.runs)

    @property
    def number(self) -> int:
        return self.before // self.size + 1

    @property
    def num_pages(self) -> int:
        after = max(self.count - self.end_index, 0)
        return self.number + -(-after // self.size)


@dataclass(frozen=True)
class RunFilters:
    q: str = ""
    team_id: int | None = None
    team_name: str = ""  # ``team`` given as a name (``?team=llm``), not an id
    status: str = ""
    place: Place = field(default_factory=Place)
    flag: str = ""
    attention: bool = False
    sort: str = "team"

    @classmethod
    def from_params(cls, params, *, team_by_name: bool = False) -> RunFilters:
        """The filters of a query string. ``team`` is a team's id; with ``team_by_name`` (the API) a value that
        is not an id is a team's name (``?team=llm``). The page's team menu sends ids, and a value there that
        is not one means "not given", as every list page's filter does (``ckptfleet.params``)."""

        def pick(name: str, allowed) -> str:
            value = (params.get(name) or "").strip()
            return value if value in allowed else ""

        team = (params.get("team") or "").strip()
        team_id = lenient_id(team)
        return cls(
            q=(params.get("q") or "").strip()[:200],
            team_id=team_id,
            team_name=team[:200] if team_by_name and team and team_id is None else "",
            status=pick("status", RunStatus.values),
            place=Place.from_params(params),
            flag=pick("flag", placement.Flag.values),
            attention=(params.get("attention") or "") in ("1", "true", "yes", "on"),
            sort=pick("sort", SORTS) or "team",
        )

    def team_refusal(self, teams: QuerySet) -> DomainError | None:
        """Why the ``team`` filter is refused, or None: a team id not among ``teams`` (those the person may
        see and choose, ``access.scoping.restrict_teams``) is not found, whether it exists or not."""
        if self.team_name:
            if teams.filter(name=self.team_name).exists():
                return None
            return DomainError(f"team {self.team_name!r} not found", code="not_found", http_status=404)
        if self.team_id is None or teams.filter(pk=self.team_id).exists():
            return None
        return DomainError(f"team {self.team_id} not found", code="not_found", http_status=404)

    @property
    def narrowed(self) -> bool:
        """Whether any filter (not the sort) is set."""
        return bool(
            self.q or self.team_id or self.team_name or self.status or self.place or self.flag or self.attention
        )

    @property
    def tier(self) -> str:
        return self.place.tier

    def narrow(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        """``runs`` limited by the filters; no counting, no order."""
        if self.q:
            runs = runs.filter(Q(name__icontains=self.q) | Q(team__name__icontains=self.q))
        if self.team_id is not None:
            runs = runs.filter(team_id=self.team_id)
        if self.team_name:
            runs = runs.filter(team__name=self.team_name)
        if self.status:
            runs = runs.filter(status=self.status)
        if self.place:
            runs = runs.filter(pk__in=self.place.usage().values("copy__checkpoint__run_id"))
        if self.flag:
            runs = runs.filter(pk__in=placement.flagged(self.flag).values("run_id"))
        if self.attention:
            bad = selectors.present_copies(temporary=False).filter(checkpoint__run_id=OuterRef("pk"))
            bad = bad.exclude(state=CopyState.COMPLETE)
            runs = runs.filter(Exists(bad))
        return runs

    def apply(self, runs: QuerySet[Run] | None = None) -> QuerySet[Run]:
        """Every matching run, counted up (``selectors.run_list``) and sorted: for a few runs, or an export."""
        runs = selectors.run_list() if runs is None else runs
        return self.narrow(runs).order_by(*SORTS[self.sort][1])

    # --- keyset pages ---------------------------------------------------------------------------

    def cursor(self, token: str | None) -> Cursor | None:
        """The cursor of a ``cursor`` parameter; None when empty. Raises ``BadCursor``."""
        return Cursor.decode(token, sort=self.sort) if token else None

    def _keyed(self, runs: QuerySet[Run]) -> QuerySet[Run]:
        keys = KEYS[self.sort]
        return self.narrow(runs).annotate(**{alias: expr for alias, expr, _ in keys})

    def _order(self, *, backward: bool = False) -> list:
        order = []
        for alias, _, desc in KEYS[self.sort]:
            order.append(F(alias).asc() if desc == backward else F(alias).desc())
        order.append(F("pk").desc() if backward else F("pk").asc())
        return order

    def _beyond(self, cursor: Cursor, *, backward: bool) -> Q:
        """Rows after ``cursor`` in the list's order (before it when ``backward``), not the cursor's row."""
        keys = KEYS[self.sort]
        out = Q()
        equal = Q()
        for (alias, _, desc), value in zip(keys, cursor.key, strict=True):
            later = desc == backward  # ascending key read forward, or descending key read backward
            out |= equal & Q(**{f"{alias}__{'gt' if later else 'lt'}": value})
            equal &= Q(**{alias: value})
        out |= equal & Q(**{f"pk__{'lt' if backward else 'gt'}": cursor.pk})
        return out

    @staticmethod
    def _key_of(row: tuple) -> tuple:
        return tuple(row[1:])

    def page(
        self, runs: QuerySet[Run], *, cursor: Cursor | None = None, offset: int = 0, size: int = PAGE_SIZE
    ) -> RunPage:
        """One page of the matching runs among ``runs`` (a plain, already scoped queryset of runs).

        From the start (or ``offset`` runs in, for old ``?page=N`` links), or after (before) ``cursor``.
        Queries: the count, the page's ids, the page's counts, and the runs ahead of a cursor's page.
        """
        aliases = [alias for alias, _, _ in KEYS[self.sort]]
        keyed = self._keyed(runs)
        backward = cursor is not None and cursor.backward
        window = keyed
        if cursor is not None:
            window = keyed.filter(self._beyond(cursor, backward=backward))
        window = window.order_by(*self._order(backward=backward)).values_list("pk", *aliases)
        rows = list(window[offset : offset + size + 1] if cursor is None else window[: size + 1])
        more = len(rows) > size
        rows = rows[:size]
        if backward:
            rows.reverse()
        count = self.narrow(runs).count()
        if cursor is None:
            before = min(offset, count)
        elif rows:
            first = Cursor(self.sort, self._key_of(rows[0]), rows[0][0])
            before = keyed.filter(self._beyond(first, backward=True)).count()
        else:
            before = 0 if backward else count  # nothing before the start, or past the end
        ids = [r[0] for r in rows]
        counted = {r.pk: r for r in selectors.run_list().filter(pk__in=ids)} if ids else {}
        page = RunPage(runs=[counted[pk] for pk in ids if pk in counted], count=count, before=before, size=size)
        if rows:
            first, last = rows[0], rows[-1]
            if (more if not backward else True) and page.end_index < count:
                page.next = Cursor(self.sort, self._key_of(last), last[0])
            if (more if backward else True) and before > 0:
                page.previous = Cursor(self.sort, self._key_of(first), first[0], backward=True)
        return page

    def query(self, **changes) -> str:
        """This filter set as a query string, with ``changes`` applied (for sort links and paging)."""
        values = {
            "q": self.q,
            "team": self.team_id or self.team_name or "",
            "status": self.status,
            **self.place.params(),
            "flag": self.flag,
            "attention": "1" if self.attention else "",
            "sort": "" if self.sort == "team" else self.sort,
        }
        values.update(changes)
        return urlencode({k: v for k, v in values.items() if v not in ("", None)})
