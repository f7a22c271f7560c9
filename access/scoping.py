"""Team scoping: with CKPTFLEET_TEAM_SCOPING on, a person in a team's group sees only that team's runs.

A team's group is named ``team:<team name>``. A person in one or more such groups sees the runs (and
their checkpoints) of those teams only; a person in none, and every admin, sees all of them. Lists,
run and checkpoint pages and the API start from a scoped queryset (NetBox's ``restrict``), so an
out-of-scope run is simply not found (404), never shown as forbidden.

What a scoped person sees beyond the run pages follows the same rule:

- copies, pins, holds, deletions and promotions only of their teams' runs (``restrict``); the
  detail page of another team's job is not found;
- the audit trail without the events of other teams' runs, checkpoints and retention policies
  (``restrict_events``);
  events of no run (hosts, locations, the price book, policies) stay, as they are the fleet's;
- spend over their teams' usage only (``spend_team_ids``), totals included. That is deliberate, also
  for a person with the finance role: whoever is to see the whole fleet's spend is put in no team
  group, which is the "fleet-wide" reading;
- retention simulations, what-ifs and policy dry runs over their teams' runs only; policies of
  other teams and their runs are not found (``restrict_policies``);
- orphans only where they belong to one of their runs (``visible_orphans``): files of no checkpoint
  and stray uploads belong to no run, and their directory names may be another team's, so they are
  left to people who see the whole fleet. Scans and inventories are of locations, not runs: the jobs
  page lists them for everyone.
"""

from __future__ import annotations

from django.apps import apps
from django.conf import settings
from django.db.models import Q, QuerySet

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


# Where each scoped model's run is, for ``restrict``.
RUN_PATHS = {
    "catalog.run": "",
    "catalog.checkpoint": "run__",
    "catalog.checkpointcopy": "checkpoint__run__",
    "actions.pin": "checkpoint__run__",
    "actions.hold": "run__",
    "actions.deletionjob": "checkpoint__run__",
    "promotion.promotionjob": "checkpoint__run__",
}


def _model(label: str):
    """A model of an app above access, by label from Django's app registry (as ``RUN_PATHS`` names them): access
    scopes those apps' rows without importing them."""
    return apps.get_model(label)


def restrict(queryset: QuerySet, user) -> QuerySet:
    """``queryset`` (of a model in ``RUN_PATHS``) limited to what belongs to runs ``user`` may see."""
    return restrict_runs(queryset, user, run_path=RUN_PATHS[queryset.model._meta.label_lower])


def restrict_events(queryset: QuerySet, user) -> QuerySet:
    """Audit events without those about runs, checkpoints and retention policies of teams ``user`` may not see."""
    names = scoped_team_names(user)
    if names is None:
        return queryset
    Checkpoint, Run = _model("catalog.Checkpoint"), _model("catalog.Run")
    RetentionPolicy = _model("retention.RetentionPolicy")
    runs = Run.objects.filter(team__name__in=sorted(names)).values("pk")
    checkpoints = Checkpoint.objects.filter(run__team__name__in=sorted(names)).values("pk")
    policies = restrict_policies(RetentionPolicy.objects.all(), user).values("pk")
    return queryset.filter(
        ~Q(target_type__in=("run", "checkpoint", "retention_policy"))
        | Q(target_type="run", target_id__in=runs)
        | Q(target_type="checkpoint", target_id__in=checkpoints)
        | Q(target_type="retention_policy", target_id__in=policies)
    )


def restrict_teams(queryset: QuerySet, user) -> QuerySet:
    """Teams (``queryset`` of ``catalog.Team``) ``user`` may see and choose: their own when scoped, else all."""
    names = scoped_team_names(user)
    if names is None:
        return queryset
    return queryset.filter(name__in=sorted(names))


def spend_team_ids(user) -> tuple[int, ...] | None:
    """The ids of the teams whose spend ``user`` sees, or None for the whole fleet's."""
    names = scoped_team_names(user)
    if names is None:
        return None
    Team = _model("catalog.Team")
    return tuple(Team.objects.filter(name__in=sorted(names)).order_by("pk").values_list("pk", flat=True))


def visible_team_names(user) -> tuple[str, ...] | None:
    """The names of the teams ``user`` is limited to, sorted (for a frozen scope), or None."""
    names = scoped_team_names(user)
    return None if names is None else tuple(sorted(names))


def restrict_policies(queryset: QuerySet, user) -> QuerySet:
    """Retention policies ``user`` may see: the fleet's own, and those of their teams and their teams' runs."""
    names = visible_team_names(user)
    if names is None:
        return queryset
    return queryset.filter(
        Q(team__isnull=True, run__isnull=True) | Q(team__name__in=names) | Q(run__team__name__in=names)
    )


def visible_orphans(groups: list, user) -> list:
    """The orphan groups ``user`` may see: for a scoped person, only those of their teams' runs."""
    names = scoped_team_names(user)
    if names is None:
        return groups
    Run = _model("catalog.Run")
    run_ids = {g.run_id for g in groups if g.run_id is not None}
    visible = set(Run.objects.filter(pk__in=run_ids, team__name__in=sorted(names)).values_list("pk", flat=True))
    return [g for g in groups if g.run_id in visible]
