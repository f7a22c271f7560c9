"""Recovery points and lineage from the shell, through the same services as the pages and the API.

    manage.py fleet_recovery show      llm/llama-7b                 # hours, steps, GPU-hours, objective
    manage.py fleet_recovery over                                   # active runs over their objective, worst first
    manage.py fleet_recovery gpus      llm/llama-7b 64 --reason "8 nodes x 8"   ("" clears it)
    manage.py fleet_recovery rpo       llm/llama-7b 6               # the run's own objective, hours ("" clears)
    manage.py fleet_recovery team-rpo  llm 12                       # the team's default objective, hours
    manage.py fleet_recovery parent    llm/llama-7b-sft 1234        # the parent checkpoint's id ("" clears)

``--as`` names the person acting (their operator role is checked); without it the command acts as the server's
operator. Every change is audited with source "command".
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from access.refusals import refusals_collected
from audit.choices import EventSource
from catalog.lineage import run_parent_set
from catalog.management.commands.fleet_run import Command as RunCommand
from catalog.models import Run, Team
from catalog.recovery_point import (
    RecoveryPoint,
    over_objective,
    recovery_point_of,
    run_gpus_set,
    run_rpo_set,
    team_rpo_set,
)
from ckptfleet.errors import DomainError


def describe(p: RecoveryPoint) -> str:
    restorable = p.checkpoint.label if p.checkpoint else "nothing restorable"
    gpus = f"{p.gpus} GPUs ({p.gpus_source})" if p.gpus else "GPUs unknown"
    gpu_hours = f"{p.gpu_hours:,.0f} GPU-h" if p.gpu_hours is not None else "GPU-h unknown"
    steps = f"{p.lost_steps:,} steps" if p.lost_steps is not None else "steps unknown"
    flag = "OVER" if p.over else "ok"
    return (
        f"{p.run}: {flag} {p.hours or 0:.1f} h since {restorable} (objective {p.objective_hours:g} h, "
        f"{p.objective_source}); loses {steps}, {p.lost_hours or 0:.1f} h, {gpus}, {gpu_hours}"
    )


class Command(BaseCommand):
    help = "Show recovery points; set a run's GPUs, objective or parent checkpoint, or a team's objective."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        show = sub.add_parser("show", help="a run's recovery point")
        show.add_argument("run", help="TEAM/RUN, or the run's id")
        sub.add_parser("over", help="active runs over their objective, most GPU-hours at risk first")
        for name, what, value in (
            ("gpus", "a run's GPU count (operator)", "gpus"),
            ("rpo", "a run's own objective, hours", "hours"),
            ("parent", "the checkpoint a run started from (its id)", "checkpoint"),
        ):
            p = sub.add_parser(name, help=what)
            p.add_argument("run", help="TEAM/RUN, or the run's id")
            p.add_argument(value, help='"" clears it')
            p.add_argument("--reason", default="")
            p.add_argument("--as", dest="username", default="", help="the person acting (needs the operator role)")
        team = sub.add_parser("team-rpo", help="a team's default objective, hours")
        team.add_argument("team")
        team.add_argument("hours", help='"" clears it')
        team.add_argument("--reason", default="")
        team.add_argument("--as", dest="username", default="", help="the person acting (needs the operator role)")

    def handle(self, *args, **opts):
        with refusals_collected(source=EventSource.COMMAND):
            try:
                getattr(self, f"_{opts['action'].replace('-', '_')}")(opts)
            except DomainError as exc:
                raise CommandError(exc.message) from None

    def _actor(self, opts):
        actor = RunCommand._actor(opts["username"])
        if not opts["username"]:
            actor = type(actor).command(label="manage.py fleet_recovery")
        return actor

    def _show(self, opts) -> None:
        self.stdout.write(describe(recovery_point_of(RunCommand._run(opts["run"]))))

    def _over(self, opts) -> None:
        points = over_objective(Run.objects.all())
        for p in points:
            self.stdout.write(describe(p))
        if not points:
            self.stdout.write("every active run is within its objective")

    def _gpus(self, opts) -> None:
        run = RunCommand._run(opts["run"])
        run_gpus_set(run=run, gpus=opts["gpus"], reason=opts["reason"], actor=self._actor(opts))
        self._show(opts)

    def _rpo(self, opts) -> None:
        run = RunCommand._run(opts["run"])
        run_rpo_set(run=run, hours=opts["hours"], reason=opts["reason"], actor=self._actor(opts))
        self._show(opts)

    def _parent(self, opts) -> None:
        run = RunCommand._run(opts["run"])
        done = run_parent_set(
            run=run, checkpoint_id=opts["checkpoint"] or None, reason=opts["reason"], actor=self._actor(opts)
        )
        self.stdout.write(f"{done}: started from {done.parent_ref or 'nothing recorded'}")

    def _team_rpo(self, opts) -> None:
        team = Team.objects.filter(name=opts["team"]).first()
        if team is None:
            raise CommandError(f"team {opts['team']} does not exist")
        team = team_rpo_set(team=team, hours=opts["hours"], reason=opts["reason"], actor=self._actor(opts))
        self.stdout.write(f"team {team}: objective {team.rpo_hours if team.rpo_hours else 'default'} h")
