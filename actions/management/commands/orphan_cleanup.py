"""Orphan clean-up from the shell, through the same service as the orphans page and the API.

    manage.py orphan_cleanup preview  --kind unclaimed --location 4 --prefix scratch
    manage.py orphan_cleanup schedule --as olga --kind multipart --location 4 --prefix llm/llama-7b --reason "..."
    manage.py orphan_cleanup schedule --as olga --kind deleted_run --location 2 --prefix vision/vit-old --run 9 ...

The group is named as the orphans page (and /api/v1/orphans/) groups it: kind, location, run directory, and the
run for copies of a deleted run. Scheduling makes a deletion of scope "orphans" that is approved, cancelled and
carried out as any deletion (``manage.py fleet_action approve|cancel --deletion N``).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from access.refusals import refusals_collected
from actions import orphans
from audit.actor import Actor
from audit.choices import EventSource
from catalog.selectors import CLEANABLE_KINDS
from ckptfleet.errors import DomainError
from ckptfleet.units import bytes_iec


class Command(BaseCommand):
    help = "Preview or schedule the clean-up of one orphan group (exact files and uploads, two-phase, audited)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=("preview", "schedule"))
        parser.add_argument("--as", dest="username", help="The person acting (required to schedule).")
        parser.add_argument("--kind", required=True, help=f"One of {', '.join(CLEANABLE_KINDS)}.")
        parser.add_argument("--location", type=int, required=True, help="The location id.")
        parser.add_argument("--prefix", default="", help="The group's run directory (empty: the location root).")
        parser.add_argument("--run", type=int, default=None, help="deleted_run: the run.")
        parser.add_argument("--reason", default="")

    def handle(self, *args, **opts):
        group = {"kind": opts["kind"], "location": opts["location"], "prefix": opts["prefix"], "run": opts["run"]}
        with refusals_collected(source=EventSource.COMMAND):
            try:
                if opts["action"] == "preview":
                    self._preview(orphans.preview(**group))
                else:
                    job = orphans.schedule_cleanup(**group, reason=opts["reason"], actor=self._actor(opts))
                    self.stdout.write(
                        f"deletion {job.pk} {job.get_state_display().lower()}: {job.items_total} items "
                        f"({bytes_iec(job.bytes_total)}), no sooner than {job.execute_after:%Y-%m-%d %H:%M} UTC"
                        + (f"; needs approval: {'; '.join(job.approval_reasons)}" if job.needs_approval else "")
                    )
            except DomainError as exc:
                raise CommandError(exc.message) from None

    def _actor(self, opts) -> Actor:
        username = opts["username"]
        if not username:
            raise CommandError("--as USERNAME is required: actions are recorded as the person who takes them")
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"no active user named {username!r}")
        return Actor.person(user, EventSource.COMMAND)

    def _preview(self, p: orphans.OrphanCleanup) -> None:
        money = f"{p.monthly_cost} {p.currency}/month" if p.monthly_cost is not None else "unknown money"
        self.stdout.write(
            f"{p.group_label}: {p.files} files, {p.uploads} uploads, {bytes_iec(p.bytes)}, {money}; "
            + (f"refused: {p.refusal}" if p.refusal else "may be scheduled")
            + (f"; needs approval: {'; '.join(p.approval_reasons)}" if p.needs_approval else "")
        )
        for row in p.sample:
            what = f"upload {row['upload_id']}" if row["upload_id"] else f"version {row['version_id'] or '-'}"
            self.stdout.write(f"  {row['path']}  {what}")
        for name in p.left_out:
            self.stdout.write(f"  kept (held or pinned): {name}")
