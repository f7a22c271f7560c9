"""Teams and their cost centers, with history: creating and renaming a team, and setting its cost center from a day.

Who: a person with the finance role (an admin holds it too); the product itself (a command run on the server)
needs none. Each change is one transaction with one audit event; bad input raises ``DomainError`` and
changes nothing.

When a cost center applies: from ``effective_from`` (a UTC day; today when not given) until the team's next
change. It may be back-dated to the first day of the current month and no further, and never set for a future
day: earlier months are closed (their spend has been reported and exported), so what they say never changes,
and a change for a later day is made on that day. Spend reports bill each day to the cost center in force that
day (``CostCenters``), so past months keep the old one. ``Team.cost_center`` is kept in step with the one in
force today, for the pages that show a team's current cost center.

Before a team's first change its ``Team.cost_center`` (set before history was kept, by the demo or an import)
stands for every day; the first change writes it down as the team's first history row, from ``SINCE_EVER``.

A team's name is also its scoping group's (``access.scoping``: ``team:<name>``): a rename renames that group
in the same transaction, so that nobody gains or loses sight of the team's runs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import date

from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.db.models import Case, CharField, F, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from access.roles import Role, require_role
from access.scoping import TEAM_GROUP_PREFIX
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.models import Team, TeamCostCenter
from ckptfleet.errors import DomainError
from fleet.pricebook import utc_today

MAX_NAME = 100  # Team.name
MAX_COST_CENTER = 100  # Team.cost_center, TeamCostCenter.cost_center
MAX_REASON = 2000
SINCE_EVER = date(1970, 1, 1)  # "from the start": a team's cost center before its first change
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def first_allowed_day(today: date) -> date:
    """The earliest day a cost center may be set from: the first day of the current month (see the module)."""
    return today.replace(day=1)


def _authorise(actor: Actor, doing: str, team: Team | None = None) -> None:
    if actor.kind == ActorKind.USER:
        require_role(
            actor.user,
            Role.FINANCE,
            doing=doing,
            target_type="team",
            target_id=team.pk if team else None,
            target_label=team.name if team else "",
        )


def _name(value) -> str:
    name = (value or "").strip() if isinstance(value, str) else ""
    if not name:
        raise DomainError("a team needs a name")
    if len(name) > MAX_NAME:
        raise DomainError(f"a team's name is at most {MAX_NAME} characters ({len(name)} given)")
    if "/" in name or _CONTROL.search(name):
        raise DomainError("a team's name may not contain '/' or control characters (runs are shown as team/run)")
    return name


def _cost_center(value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DomainError("a cost center is text")
    value = value.strip()
    if len(value) > MAX_COST_CENTER:
        raise DomainError(f"a cost center is at most {MAX_COST_CENTER} characters ({len(value)} given)")
    if _CONTROL.search(value):
        raise DomainError("a cost center may not contain control characters")
    return value


def _reason(value) -> str:
    reason = (value or "").strip() if isinstance(value, str) else ""
    if len(reason) > MAX_REASON:
        raise DomainError(f"a reason is at most {MAX_REASON} characters")
    return reason


def _effective_from(value, today: date) -> date:
    if value is None or value == "":
        return today
    if isinstance(value, str):
        try:
            value = date.fromisoformat(value.strip())
        except ValueError:
            raise DomainError(f"{value!r} is not a day (YYYY-MM-DD)") from None
    if not isinstance(value, date):
        raise DomainError("the day a cost center applies from must be a date (YYYY-MM-DD)")
    first = first_allowed_day(today)
    if value > today:
        raise DomainError(
            f"a cost center cannot be set for a future day ({value:%Y-%m-%d}; today is {today:%Y-%m-%d} UTC): "
            "set it on that day"
        )
    if value < first:
        raise DomainError(
            f"a cost center can be back-dated to {first:%Y-%m-%d} at the earliest: earlier months are closed, "
            f"their spend already reported ({value:%Y-%m-%d} asked)"
        )
    return value


def _name_taken(name: str, *, other_than: int | None = None) -> bool:
    taken = Team.objects.filter(name__iexact=name)
    if other_than is not None:
        taken = taken.exclude(pk=other_than)
    return taken.exists()


def team_create(*, actor: Actor, name: str, cost_center: str = "", reason: str = "", request_id: str = "") -> Team:
    """A new team, with its cost center (if given) from the start: a new team has no spend before today."""
    _authorise(actor, "creating a team")
    name, cost_center, reason = _name(name), _cost_center(cost_center), _reason(reason)
    with transaction.atomic():
        if _name_taken(name):
            raise DomainError(f"a team named {name!r} already exists", code="exists", http_status=409)
        try:
            with transaction.atomic():
                team = Team.objects.create(name=name, cost_center=cost_center)
        except IntegrityError:
            raise DomainError(f"a team named {name!r} already exists", code="exists", http_status=409) from None
        if cost_center:
            _append(team, cost_center, SINCE_EVER, actor, reason or "set when the team was created")
        audit(
            actor,
            "team.create",
            target_type="team",
            target_id=team.pk,
            target_label=team.name,
            reason=reason,
            before=None,
            after={"name": team.name, "cost_center": cost_center},
            request_id=(request_id or "")[:64],
        )
    return team


def _lock(team_id) -> Team:
    try:
        return Team.objects.select_for_update(of=("self",)).get(pk=team_id)
    except (Team.DoesNotExist, ValueError, TypeError):
        raise DomainError("no such team", code="not_found", http_status=404) from None


def team_rename(*, actor: Actor, team_id: int, name: str, reason: str = "", request_id: str = "") -> Team:
    """Rename a team, and its scoping group with it (``access.scoping``). Its runs, spend and history stay its own."""
    _authorise(actor, "renaming a team")
    name, reason = _name(name), _reason(reason)
    with transaction.atomic():
        team = _lock(team_id)
        if team.name == name:
            raise DomainError(f"the team is already named {name!r}: nothing changed", code="unchanged")
        if _name_taken(name, other_than=team.pk):
            raise DomainError(f"a team named {name!r} already exists", code="exists", http_status=409)
        old_group, new_group = f"{TEAM_GROUP_PREFIX}{team.name}", f"{TEAM_GROUP_PREFIX}{name}"
        group = Group.objects.select_for_update(of=("self",)).filter(name=old_group).first()
        if group is not None and Group.objects.filter(name=new_group).exists():
            raise DomainError(
                f"the scoping group {new_group!r} already exists: an administrator merges or removes it first",
                code="exists",
                http_status=409,
            )
        before = {"name": team.name}
        team.name = name
        try:
            with transaction.atomic():
                team.save(update_fields=["name"])
                if group is not None:
                    group.name = new_group
                    group.save(update_fields=["name"])
        except IntegrityError:
            raise DomainError(f"a team named {name!r} already exists", code="exists", http_status=409) from None
        audit(
            actor,
            "team.rename",
            target_type="team",
            target_id=team.pk,
            target_label=team.name,
            reason=reason,
            before=before,
            after={"name": team.name, "scoping_group": new_group if group is not None else None},
            request_id=(request_id or "")[:64],
        )
    return team


def _append(team: Team, cost_center: str, effective_from: date, actor: Actor, reason: str) -> TeamCostCenter:
    return TeamCostCenter.objects.create(
        team=team,
        cost_center=cost_center,
        effective_from=effective_from,
        set_by=actor.user if actor.kind == ActorKind.USER else None,
        set_by_label=actor.label[:200],
        set_at=timezone.now(),
        reason=reason,
    )


@dataclass(frozen=True)
class CostCenterChange:
    """What setting a cost center did: the history row, and the day a later change takes over (None: none does)."""

    entry: TeamCostCenter
    until: date | None


def team_set_cost_center(
    *,
    actor: Actor,
    team_id: int,
    cost_center: str,
    effective_from: date | str | None = None,
    reason: str = "",
    request_id: str = "",
    today: date | None = None,
) -> CostCenterChange:
    """Bill a team's spend to ``cost_center`` (empty: to none) from ``effective_from`` on (see the module for which
    days are allowed), until the team's next change. Earlier days keep the cost center they had."""
    _authorise(actor, "setting a team's cost center")
    today = today or utc_today()
    cost_center, reason = _cost_center(cost_center), _reason(reason)
    day = _effective_from(effective_from, today)
    with transaction.atomic():
        team = _lock(team_id)
        rows = list(TeamCostCenter.objects.filter(team=team))
        if not rows:
            # What the team had before history was kept stands for every earlier day (the module).
            rows = [_append(team, team.cost_center, SINCE_EVER, actor, "in force before its history was kept")]
        timeline = CostCenters.from_rows(rows, {})
        current = timeline.on(team.pk, day)
        if current == cost_center:
            shown = cost_center or "no cost center"
            raise DomainError(f"{team.name} already has {shown} on {day:%Y-%m-%d}: nothing changed", code="unchanged")
        entry = _append(team, cost_center, day, actor, reason)
        later = sorted({h.effective_from for h in rows if h.effective_from > day})
        until = later[0] if later else None
        before_today = team.cost_center
        team.cost_center = CostCenters.from_rows([*rows, entry], {}).on(team.pk, today)
        if team.cost_center != before_today:
            team.save(update_fields=["cost_center"])
        audit(
            actor,
            "team.cost_center",
            target_type="team",
            target_id=team.pk,
            target_label=team.name,
            reason=reason,
            before={"cost_center": current, "on": day, "current": before_today},
            after={
                "cost_center": cost_center,
                "effective_from": day,
                "until": until,
                "current": team.cost_center,
                "history_id": entry.pk,
            },
            request_id=(request_id or "")[:64],
        )
    return CostCenterChange(entry, until)


# --- reading the history ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CostCenters:
    """Every team's cost center on every day, from the history (one query) and, for teams without history, the
    cost center they carry. ``expression`` turns it into SQL for grouping usage rows by cost center."""

    # {team id: [(effective_from, cost center)], newest first; one entry per day, the one set last}
    timelines: dict[int, list[tuple[date, str]]]
    plain: dict[int, str]  # every team's Team.cost_center: what a team without history has on every day

    @classmethod
    def load(cls) -> CostCenters:
        rows = TeamCostCenter.objects.order_by("team_id", "effective_from", "set_at", "pk").only(
            "team_id", "effective_from", "cost_center", "set_at"
        )
        plain = dict(Team.objects.order_by().values_list("pk", "cost_center"))
        return cls.from_rows(list(rows), plain)

    @classmethod
    def from_rows(cls, rows: list[TeamCostCenter], plain: dict[int, str]) -> CostCenters:
        by_day: dict[int, dict[date, str]] = defaultdict(dict)
        for row in sorted(rows, key=lambda r: (r.team_id, r.effective_from, r.set_at, r.pk or 0)):
            by_day[row.team_id][row.effective_from] = row.cost_center  # set later, wins
        timelines = {team: sorted(days.items(), reverse=True) for team, days in by_day.items()}
        return cls(timelines, plain)

    def on(self, team_id: int | None, day: date, default: str = "") -> str:
        """The team's cost center on ``day``; ``default`` (its Team.cost_center) for a team without history."""
        if team_id is None:
            return ""
        timeline = self.timelines.get(team_id)
        if timeline is None:
            return self.plain.get(team_id, default)
        for since, cost_center in timeline:
            if since <= day:
                return cost_center
        return ""

    def spans(self, team_id: int | None, first: date, last: date, default: str = "") -> list[tuple[date, str]]:
        """The cost centers in force over ``[first, last]``, oldest first, each with the first day it applies."""
        out = [(first, self.on(team_id, first, default))]
        for since, cost_center in sorted(self.timelines.get(team_id or 0, [])):
            if first < since <= last and cost_center != out[-1][1]:
                out.append((since, cost_center))
        return out

    def changed_within(self, first: date, last: date) -> set[int]:
        """Teams whose cost center changes on a day of ``[first, last]`` other than a month's first."""
        return {
            team
            for team, timeline in self.timelines.items()
            if any(first <= since <= last and since.day != 1 for since, _ in timeline)
        }

    def expression(self, day_field: str):
        """SQL for the cost center of a usage row (with ``team_id`` and the day ``day_field``): by the history, else
        the team's own ``cost_center``, else '' (no team)."""
        whens = [
            When(Q(team_id=team) & Q(**{f"{day_field}__gte": since}), then=Value(cost_center))
            for team, timeline in sorted(self.timelines.items())
            for since, cost_center in timeline  # newest first: the first match is the one in force
        ]
        whens += [When(team_id=team, then=Value("")) for team in sorted(self.timelines)]  # before any: none
        fallback = Coalesce(F("team__cost_center"), Value(""), output_field=CharField())
        if not whens:
            return fallback
        return Case(*whens, default=fallback, output_field=CharField())


def history(team_ids: list[int] | None = None) -> dict[int, list[TeamCostCenter]]:
    """{team id: its history rows, newest first}: for the teams page and API (one query)."""
    rows = TeamCostCenter.objects.select_related("set_by").order_by("-effective_from", "-set_at", "-pk")
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    out: dict[int, list[TeamCostCenter]] = defaultdict(list)
    for row in rows:
        out[row.team_id].append(row)
    return out
