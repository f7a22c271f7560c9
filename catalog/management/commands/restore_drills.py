"""Restore drills from the shell: run a round now, or list the recent ones.

manage.py restore_drills run        # what beat does daily: per team, a sample read back and checked
manage.py restore_drills list       # the newest drills, newest first
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from catalog import drills
from catalog.models import RestoreDrill
from catalog.templatetags.fleet_format import bytes_iec


class Command(BaseCommand):
    help = "Run restore drills now, or list the recent ones."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="do", required=True)
        sub.add_parser("run", help="one round now: per team, trusted checkpoints read back from object storage")
        listing = sub.add_parser("list", help="the newest drills")
        listing.add_argument("--limit", type=int, default=20)

    def _line(self, d: RestoreDrill) -> str:
        speed = f" at {d.mib_per_s:.1f} MiB/s" if d.mib_per_s else ""
        return (
            f"{d.started_at:%Y-%m-%d %H:%M} {d.outcome:7} {d.checkpoint} copy {d.copy_id} ({d.tier}"
            f"{', ' + d.storage_class if d.storage_class else ''}): {d.files} file(s), {bytes_iec(d.bytes)}{speed}"
            f" - {d.detail}"
        )

    def handle(self, *args, **opts):
        if opts["do"] == "run":
            rows = drills.run_drills()
            for d in rows:
                self.stdout.write(self._line(d))
            self.stdout.write(f"{len(rows)} drill(s), {sum(1 for d in rows if d.outcome != 'passed')} not passed")
            return
        for d in RestoreDrill.objects.select_related("checkpoint__run__team")[: max(1, opts["limit"])]:
            self.stdout.write(self._line(d))
