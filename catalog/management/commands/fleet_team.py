"""Teams and their cost centers from the shell, through the same services as the Teams page and the API.

    manage.py fleet_team list
    manage.py fleet_team create      --as fiona --name vision [--cost-center CC-200] [--reason ...]
    manage.py fleet_team rename      --as fiona --team vision --name vision-research [--reason ...]
    manage.py fleet_team cost-center --as fiona --team vision --cost-center CC-300 [--from 2026-11-01] --reason ...

``--team`` takes a team's name or id. ``--as`` names the person acting (the finance role is checked as on the
pages, and the audit trail records them with source "command"); without it the command acts as itself, the
product's own account ("manage.py"), as for the demo seed. ``--cost-center ""`` clears it from that day.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from access.refusals import refusals_collected
from audit.actor import Actor
from audit.choices import EventSource
from catalog import teams
from catalog.models import Team
from ckptfleet.errors import DomainError

ACTIONS = ("list", "create", "rename", "cost-center")


class Command(BaseCommand):
    help = "List teams, create or rename one, or set a team's cost center from a day; each change audited."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=ACTIONS)
        parser.add_argument("--as", dest="username", help="The person acting (default: the command itself).")
        parser.add_argument("--team", help="A team's name or id (rename, cost-center).")
        parser.add_argument("--name", help="The new team's name (create) or its new name (rename).")
        parser.add_argument("--cost-center", dest="cost_center", default=None)
        parser.add_argument(
            "--from", dest="effective_from", default=None, help="cost-center: the first UTC day (default today)."
        )
        parser.add_argument("--reason", default="")

    def handle(self, *args, **opts):
        with refusals_collected(source=EventSource.COMMAND):
            try:
                self._handle(opts["action"], opts)
            except DomainError as exc:
                raise CommandError(exc.message) from None

    def _actor(self, opts) -> Actor:
        username = opts["username"]
        if not username:
            return Actor.command()
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user named {username!r}")
        return Actor.person(user, EventSource.COMMAND)

    def _team(self, value) -> Team:
        if not value:
            raise CommandError("--team is required for this action")
        team = Team.objects.filter(name=value).first()
        if team is None and str(value).isdigit():
            team = Team.objects.filter(pk=int(value)).first()
        if team is None:
            raise CommandError(f"no team named {value!r}")
        return team

    def _handle(self, action: str, opts) -> None:
        out = self.stdout
        if action == "list":
            history = teams.history()
            for team in Team.objects.order_by("name"):
                out.write(f"{team.pk}\t{team.name}\t{team.cost_center or '-'}")
                for row in history.get(team.pk, []):
                    since = "the start" if row.effective_from == teams.SINCE_EVER else f"{row.effective_from:%Y-%m-%d}"
                    out.write(f"\t\tfrom {since}: {row.cost_center or '-'} (set by {row.set_by_label})")
            return
        actor = self._actor(opts)
        if action == "create":
            team = teams.team_create(
                actor=actor, name=opts["name"] or "", cost_center=opts["cost_center"] or "", reason=opts["reason"]
            )
            out.write(f"created team {team.name} (id {team.pk}), cost center {team.cost_center or 'none'}")
        elif action == "rename":
            team = teams.team_rename(
                actor=actor, team_id=self._team(opts["team"]).pk, name=opts["name"] or "", reason=opts["reason"]
            )
            out.write(f"renamed team {team.pk} to {team.name}")
        elif action == "cost-center":
            if opts["cost_center"] is None:
                raise CommandError('--cost-center is required (--cost-center "" clears it from that day)')
            team = self._team(opts["team"])
            change = teams.team_set_cost_center(
                actor=actor,
                team_id=team.pk,
                cost_center=opts["cost_center"],
                effective_from=opts["effective_from"],
                reason=opts["reason"],
            )
            until = f" until {change.until:%Y-%m-%d}" if change.until else ""
            entry = change.entry
            out.write(
                f"{team.name}: {entry.cost_center or 'no cost center'} from {entry.effective_from:%Y-%m-%d}{until}"
            )
