"""Promote a checkpoint copy to a hotter tier from the shell, preview first, or cancel a promotion.

    manage.py promote preview --checkpoint 42 --target ckpt-eu --class STANDARD
    manage.py promote start --checkpoint 42 --target ckpt-eu --class STANDARD --reason "incident 7"
    manage.py promote start --copy 311 --target ckpt-eu --restore-days 3 --reason "read it where it is"
    manage.py promote cancel 17 --reason "not needed"

The same services as the pages and the API: the same checks, one audit event per action (source "command").
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from catalog.models import Checkpoint, CheckpointCopy
from ckptfleet.errors import DomainError
from ckptfleet.units import bytes_iec
from fleet.models import StorageLocation
from promotion import services
from promotion.choices import RestoreTier
from promotion.models import PromotionJob


class Command(BaseCommand):
    help = "Preview, start or cancel the promotion of a checkpoint copy to a hotter tier."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        for name in ("preview", "start"):
            p = sub.add_parser(name)
            source = p.add_mutually_exclusive_group(required=True)
            source.add_argument("--checkpoint", type=int, help="a checkpoint id: its best complete copy is read")
            source.add_argument("--copy", type=int, help="one copy's id")
            p.add_argument("--target", required=True, help="the target location's name or id")
            p.add_argument("--class", dest="storage_class", default="", help="target storage class (buckets)")
            p.add_argument("--restore-days", type=int, default=7)
            p.add_argument("--restore-tier", default=RestoreTier.STANDARD, choices=RestoreTier.values)
            if name == "start":
                p.add_argument("--reason", required=True)
        c = sub.add_parser("cancel")
        c.add_argument("job", type=int)
        c.add_argument("--reason", default="")

    def handle(self, *args, action, **options):
        actor = Actor.command()
        try:
            if action == "cancel":
                job = PromotionJob.objects.filter(pk=options["job"]).first()
                if job is None:
                    raise CommandError(f"there is no promotion {options['job']}")
                services.cancel(job=job, actor=actor, reason=options["reason"])
                self.stdout.write(f"promotion #{job.pk} cancelled")
                return
            target = self._location(options["target"])
            checkpoint, copy = self._source(options)
            kwargs = {
                "target_location": target,
                "target_storage_class": options["storage_class"],
                "restore_days": options["restore_days"],
                "restore_tier": options["restore_tier"],
            }
            if action == "preview":
                plan = services.promotion_plan(copy=copy or services.best_source(checkpoint, target), **kwargs)
                cost = "unknown" if plan.cost_per_month is None else f"{plan.cost_per_month:.2f} {plan.currency}"
                where = ", ".join(filter(None, [plan.target_tier_label, plan.target_storage_class]))
                self.stdout.write(
                    f"{plan.method_label}: {plan.files} file(s), {bytes_iec(plan.bytes)} to {target.name} ({where}); "
                    f"{cost} per month at the target"
                )
                for line in plan.steps + plan.notes:
                    self.stdout.write(f"  - {line}")
                return
            job = services.promote(checkpoint=checkpoint, copy=copy, actor=actor, reason=options["reason"], **kwargs)
            self.stdout.write(f"promotion #{job.pk} {job.get_state_display().lower()} ({job.get_method_display()})")
        except DomainError as exc:
            raise CommandError(exc.message) from None

    def _location(self, text: str) -> StorageLocation:
        found = StorageLocation.objects.filter(pk=int(text)) if text.isdigit() else StorageLocation.objects.none()
        found = found.first() or StorageLocation.objects.filter(name=text).first()
        if found is None:
            raise CommandError(f"there is no storage location {text!r}")
        return found

    def _source(self, options) -> tuple[Checkpoint | None, CheckpointCopy | None]:
        if options["copy"]:
            copy = CheckpointCopy.objects.select_related("checkpoint", "location").filter(pk=options["copy"]).first()
            if copy is None:
                raise CommandError(f"there is no checkpoint copy {options['copy']}")
            return None, copy
        checkpoint = Checkpoint.objects.filter(pk=options["checkpoint"]).first()
        if checkpoint is None:
            raise CommandError(f"there is no checkpoint {options['checkpoint']}")
        return checkpoint, None
