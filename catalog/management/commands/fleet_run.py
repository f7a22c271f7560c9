"""A run's status from the shell, through the same service as the run page and the API (``catalog.lifecycle``).

    manage.py fleet_run status llm/llama-7b finished --reason "reached the target loss" [--as olga]
    manage.py fleet_run show   llm/llama-7b
    manage.py fleet_run infer                     # what beat does daily: idle runs marked finished, "inferred"

``--as`` names the person acting (their operator role is checked, as on the page); without it the command
acts as the server's operator ("manage.py fleet_run"). Either way the audit trail records source "command".
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from access.refusals import refusals_collected
from audit.actor import Actor
from audit.choices import EventSource
from catalog.choices import RunStatus, RunStatusSource
from catalog.lifecycle import idle_days, run_status_set, runs_infer_ended
from catalog.models import Run
from ckptfleet.errors import DomainError


class Command(BaseCommand):
    help = "Set or show a run's status (active, finished, failed, abandoned, deleted), or infer idle runs' end."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        status = sub.add_parser("status", help="set a run's status, with a reason")
        status.add_argument("run", help="TEAM/RUN, or the run's id")
        status.add_argument("status", choices=RunStatus.values)
        status.add_argument("--reason", default="")
        status.add_argument("--as", dest="username", default="", help="the person acting (needs the operator role)")
        show = sub.add_parser("show", help="a run's status, its source, since when and why")
        show.add_argument("run", help="TEAM/RUN, or the run's id")
        sub.add_parser("infer", help="mark runs with no new checkpoint for CKPTFLEET_RUN_IDLE_DAYS finished")

    def handle(self, *args, **opts):
        with refusals_collected(source=EventSource.COMMAND):
            try:
                getattr(self, f"_{opts['action']}")(opts)
            except DomainError as exc:
                raise CommandError(exc.message) from None

    @staticmethod
    def _run(ref: str) -> Run:
        runs = Run.objects.select_related("team")
        run = None
        if ref.isdigit():
            run = runs.filter(pk=int(ref)).first()
        elif "/" in ref:
            team, _, name = ref.partition("/")
            run = runs.filter(team__name=team, name=name).first()
        else:
            raise CommandError(f"{ref!r} is neither TEAM/RUN nor a run id")
        if run is None:
            raise CommandError(f"run {ref} does not exist")
        return run

    @staticmethod
    def _actor(username: str) -> Actor:
        if not username:
            return Actor.command(label="manage.py fleet_run")
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user named {username!r}")
        return Actor.person(user, EventSource.COMMAND)

    def _status(self, opts) -> None:
        run = self._run(opts["run"])
        change = run_status_set(
            run=run,
            status=opts["status"],
            reason=opts["reason"],
            actor=self._actor(opts["username"]),
            source=RunStatusSource.OPERATOR,
        )
        if change.changed:
            self.stdout.write(f"{change.run}: {change.before} -> {change.run.status}")
        else:
            self.stdout.write(f"{change.run} is already {change.run.status}: nothing changed")

    def _show(self, opts) -> None:
        run = self._run(opts["run"])
        line = f"{run}: {run.get_status_display()}"
        if run.status_source:
            line += f" · {run.get_status_source_display().lower()} by {run.status_by_label}"
            line += f" at {run.status_changed_at:%Y-%m-%d %H:%M} UTC"
        if run.status_reason:
            line += f": {run.status_reason}"
        self.stdout.write(line)

    def _infer(self, opts) -> None:
        ended = runs_infer_ended()
        self.stdout.write(f"{len(ended)} run(s) with no new checkpoint for {idle_days()} days marked finished")
