"""The runs list's filters and sort orders, shared by the page and the API so that both list the same runs.

Parameters (all optional): ``q`` (part of a run or team name), ``team`` (id), ``status``
(active/finished/deleted), ``tier`` (runs with a present copy holding bytes on that tier),
``flag`` (runs with a checkpoint raising that placement flag), ``attention=1`` (runs with a partial
or corrupt present copy) and ``sort`` (one of ``SORTS``). Unknown values are ignored, never an error
page: a filter link pasted from an older version still opens the list.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Q, QuerySet

from catalog import placement, selectors
from catalog.choices import RunStatus
from catalog.models import CopyTierUsage, Run
from fleet.choices import Tier

SORTS = {
    "team": ("Team, then run", ("team__name", "name", "pk")),
    "name": ("Run name", ("name", "team__name", "pk")),
    "bytes": ("Most bytes first", (F("bytes").desc(nulls_last=True), "team__name", "name", "pk")),
    "newest": ("Newest step first", (F("newest_step").desc(nulls_last=True), "team__name", "name", "pk")),
    "attention": ("Most needing attention first", ("-bad_copies", "team__name", "name", "pk")),
    "checkpoints": ("Most checkpoints first", ("-checkpoint_count", "team__name", "name", "pk")),
}


@dataclass(frozen=True)
class RunFilters:
    q: str = ""
    team_id: int | None = None
    status: str = ""
    tier: str = ""
    flag: str = ""
    attention: bool = False
    sort: str = "team"

    @classmethod
    def from_params(cls, params) -> RunFilters:
        def pick(name: str, allowed) -> str:
            value = (params.get(name) or "").strip()
            return value if value in allowed else ""

        team = (params.get("team") or "").strip()
        return cls(
            q=(params.get("q") or "").strip()[:200],
            team_id=int(team) if team.isdigit() and int(team) > 0 else None,
            status=pick("status", RunStatus.values),
            tier=pick("tier", Tier.values),
            flag=pick("flag", placement.Flag.values),
            attention=(params.get("attention") or "") in ("1", "true", "yes", "on"),
            sort=pick("sort", SORTS) or "team",
        )

    @property
    def narrowed(self) -> bool:
        """Whether any filter (not the sort) is set."""
        return bool(self.q or self.team_id or self.status or self.tier or self.flag or self.attention)

    def apply(self, runs: QuerySet[Run] | None = None) -> QuerySet[Run]:
        runs = selectors.run_list() if runs is None else runs
        if self.q:
            runs = runs.filter(Q(name__icontains=self.q) | Q(team__name__icontains=self.q))
        if self.team_id is not None:
            runs = runs.filter(team_id=self.team_id)
        if self.status:
            runs = runs.filter(status=self.status)
        if self.tier:
            on_tier = CopyTierUsage.objects.filter(tier=self.tier, copy__gone_at__isnull=True, bytes__gt=0)
            runs = runs.filter(pk__in=on_tier.values("copy__checkpoint__run_id"))
        if self.flag:
            runs = runs.filter(pk__in=placement.flagged(self.flag).values("run_id"))
        if self.attention:
            runs = runs.filter(bad_copies__gt=0)
        return runs.order_by(*SORTS[self.sort][1])

    def query(self, **changes) -> str:
        """This filter set as a query string, with ``changes`` applied (for sort links and paging)."""
        values = {
            "q": self.q,
            "team": self.team_id or "",
            "status": self.status,
            "tier": self.tier,
            "flag": self.flag,
            "attention": "1" if self.attention else "",
            "sort": "" if self.sort == "team" else self.sort,
        }
        values.update(changes)
        from urllib.parse import urlencode

        return urlencode({k: v for k, v in values.items() if v not in ("", None)})
