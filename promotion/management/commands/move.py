"""Move checkpoints to a colder tier (demote) or off a host (offload) from the shell, preview first.

    manage.py move preview --checkpoint 42 --target ckpt-cold --class GLACIER_IR
    manage.py move preview --run 7 --older-than-days 30 --importance routine --target ckpt-cold --class DEEP_ARCHIVE
    manage.py move start --run 7 --target ckpt-cold --class GLACIER_IR --reason "run finished"

The same services as the pages and the API (``promotion.moves``): the same checks, one ``move.request`` audit
event per job (source "command"). Follow or cancel a job with ``manage.py promote cancel <id>``.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from catalog.choices import Importance
from ckptfleet.errors import DomainError
from ckptfleet.units import bytes_iec
from fleet.models import StorageLocation
from promotion import moves, selectors


def _money(value, currency: str) -> str:
    return "unknown" if value is None else f"{moves.cents(value)} {currency}"


class Command(BaseCommand):
    help = "Preview or start the move of checkpoints to a colder bucket or storage class."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        for name in ("preview", "start"):
            p = sub.add_parser(name)
            which = p.add_mutually_exclusive_group(required=True)
            which.add_argument("--checkpoint", type=int, action="append", help="a checkpoint id (repeat for more)")
            which.add_argument("--run", type=int, help="a run id: its checkpoints, filtered by the options below")
            p.add_argument("--older-than-days", type=int, default=None, help="first seen more than N days ago")
            p.add_argument("--importance", action="append", choices=Importance.values, help="repeat for more")
            p.add_argument("--target", required=True, help="the target bucket location's name or id")
            p.add_argument("--class", dest="storage_class", required=True, choices=moves.MOVE_CLASSES)
            p.add_argument("--source", default="", help="read the copies at this location (name or id)")
            if name == "start":
                p.add_argument("--reason", required=True)

    def handle(self, *args, action, **options):
        try:
            checkpoints = selectors.move_candidates(
                checkpoint_ids=options["checkpoint"],
                run_id=options["run"],
                older_than_days=options["older_than_days"],
                importance=options["importance"],
            )
            kwargs = {
                "checkpoints": checkpoints,
                "target_location": self._location(options["target"]),
                "target_storage_class": options["storage_class"],
                "source_location": self._location(options["source"]) if options["source"] else None,
            }
            if action == "preview":
                self._show(moves.move_plan(**kwargs))
                return
            jobs = moves.request_move(actor=Actor.command(), reason=options["reason"], **kwargs)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        for job in jobs:
            self.stdout.write(f"{job.get_direction_display().lower()} #{job.pk} of {job.checkpoint}: {job.state}")

    def _show(self, plan: moves.MovePlan) -> None:
        c = plan.currency
        self.stdout.write(
            f"{len(plan.lines)} checkpoint(s), {plan.files} file(s), {bytes_iec(plan.bytes)} to "
            f"{plan.target_location.name} ({plan.target_storage_class}, {plan.target_tier_label}); saving "
            f"{_money(plan.saving_per_month, c)} per month; one-off {_money(plan.one_off, c)} (early deletion "
            f"{_money(plan.early_deletion, c)}, requests {_money(plan.requests, c)}); payback "
            f"{'never' if plan.payback_days is None else f'{plan.payback_days} day(s)'}"
        )
        for line in plan.lines:
            self.stdout.write(
                f"  {line.checkpoint}: {line.method_label}; {line.files} file(s), {bytes_iec(line.bytes)}; saving "
                f"{_money(line.saving_per_month, c)} per month; source: {line.freeing}"
            )
        for excluded in plan.excluded:
            self.stdout.write(f"  left out: {excluded.checkpoint}: {excluded.reason}")
        for row in plan.stays_hot_rows():
            self.stdout.write(f"  stays readable in {row['run_label']}: {row['checkpoint'] or 'nothing restorable'}")
        self.stdout.write(f"  {plan.approval_note}")

    def _location(self, text: str) -> StorageLocation:
        found = StorageLocation.objects.filter(pk=int(text)) if text.isdigit() else StorageLocation.objects.none()
        found = found.first() or StorageLocation.objects.filter(name=text).first()
        if found is None:
            raise CommandError(f"there is no storage location {text!r}")
        return found
