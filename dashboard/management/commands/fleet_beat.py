"""The periodic work without a broker: the beat schedule kept in this process, or every task run once now.

    manage.py fleet_beat              keep the schedule until Ctrl-C (what `make demo` runs beside the server)
    manage.py fleet_beat --list       the schedule
    manage.py fleet_beat --once       run every periodic task now (audited "periodic.run_now"), then exit

With a broker (REDIS_URL set) run ``celery beat`` instead; ``--once`` then sends the tasks to the workers.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from audit.actor import Actor
from dashboard import periodic


class Command(BaseCommand):
    help = "Keep the periodic schedule in-process (no broker), list it, or run every periodic task now (audited)."

    def add_arguments(self, parser):
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--once", action="store_true", help="Run every periodic task now, then exit.")
        group.add_argument("--list", action="store_true", help="Print the schedule and exit.")

    def handle(self, *args, **opts):
        if opts["list"]:
            for entry in periodic.entries():
                self.stdout.write(f"{entry.name:32} every {_every(entry.every):>10}  {entry.task}")
            return
        if opts["once"]:
            failed = 0
            for outcome in periodic.run_now(actor=Actor.command(label="manage.py fleet_beat --once")):
                failed += outcome.state == "failed"
                self.stdout.write(
                    f"{outcome.entry.name:32} {outcome.state}{': ' + outcome.detail if outcome.detail else ''}"
                )
            if failed:
                self.stderr.write(f"{failed} periodic task(s) failed; the log says why")
            return
        stopping = periodic.stop_on_signals()
        mode = "in this process" if periodic.in_process() else "sent to the workers"
        self.stdout.write(f"fleet_beat: {len(periodic.entries())} periodic tasks, each run {mode} on its schedule")
        self.stdout.flush()
        try:
            periodic.loop(stop=stopping.is_set, on_outcome=self._report)
        except KeyboardInterrupt:  # at once, even mid-task: every task survives being stopped and runs again
            pass
        self.stdout.write("fleet_beat: stopped")

    def _report(self, outcome: periodic.Outcome) -> None:
        if outcome.state == "failed":
            self.stderr.write(f"fleet_beat: {outcome.entry.name} failed: {outcome.detail}")
        else:
            self.stdout.write(f"fleet_beat: {outcome.entry.name} {outcome.state}")
        self.stdout.flush()


def _every(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"
