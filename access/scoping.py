"""Team scoping: with CKPTFLEET_TEAM_SCOPING on, a person in a team's group sees only that team's runs.

A team's group is named ``team:<team name>``. A person in one or more such groups sees the runs (and
their checkpoints) of those teams only; a person in none, and every admin, sees all of them. Lists,
run and checkpoint pages and the API start from a scoped queryset (NetBox's ``restrict``), so an
out-of-scope run is simply not found (404), never shown as forbidden.
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet

from access.roles import Role, _group_names, has_role

TEAM_GROUP_PREFIX = "team:"


def scoped_team_names(user) -> frozenset[str] | None:
    """The names of the teams ``user`` is limited to, or None when not limited."""
    if not settings.CKPTFLEET_TEAM_SCOPING or user is None or not user.is_authenticated:
        return None
    if not hasattr(user, "groups") or has_role(user, Role.ADMIN):
        return None
    names = frozenset(
        name[len(TEAM_GROUP_PREFIX) :] for name in _group_names(user) if name.startswith(TEAM_GROUP_PREFIX)
    )
    return names or None


def restrict_runs(queryset: QuerySet, user, *, run_path: str = "") -> QuerySet:
    """``queryset`` limited to the runs ``user`` may see; ``run_path`` leads to the run ("run__" for checkpoints)."""
    names = scoped_team_names(user)
    if names is None:
        return queryset
    return queryset.filter(**{f"{run_path}team__name__in": sorted(names)})


def may_see_run(user, run) -> bool:
    names = scoped_team_names(user)
    return names is None or (run.team is not None and run.team.name in names)
