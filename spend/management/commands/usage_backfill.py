"""Estimate the usage of the days before each location's first inventory, from the files' modification times.

    manage.py usage_backfill --since 2026-09-01

For a new install: the spend pages otherwise start on the day of the first inventory. Each file present
now counts from the UTC day of its modification time, at that day's prices; the rows are marked as
estimated and the spend pages say so. Days with measured usage are never touched; running it again
replaces only its own estimates. See ``spend.backfill`` for what an estimate cannot know.
"""

from __future__ import annotations

from datetime import date

from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from ckptfleet.errors import DomainError
from spend.backfill import usage_backfill


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--since takes a day as YYYY-MM-DD, not {text!r}") from None


class Command(BaseCommand):
    help = "Estimate past days' usage from file modification times, before each location's first inventory."

    def add_arguments(self, parser):
        parser.add_argument("--since", required=True, metavar="YYYY-MM-DD", help="the first day to estimate (UTC)")

    def handle(self, *args, **opts):
        since = _day(opts["since"])
        try:
            result = usage_backfill(since=since, actor=Actor.command(label="manage.py usage_backfill"))
        except DomainError as exc:
            raise CommandError(exc.message) from None
        for name, days in sorted(result.locations.items()):
            what = f"{days} day(s) estimated" if days else "history already reaches that day: nothing estimated"
            self.stdout.write(f"{name}: {what}")
        self.stdout.write(
            f"usage since {since:%Y-%m-%d}: {result.days} location-day(s), {result.rows:,} row(s) estimated "
            "from file modification times"
        )
