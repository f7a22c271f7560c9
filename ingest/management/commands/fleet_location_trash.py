"""Set a storage location's soft-delete window: how many days executed deletions stay recoverable there.

    manage.py fleet_location_trash s3-archive 14 --reason "finance asked for two weeks"
    manage.py fleet_location_trash s3-archive default --reason "back to CKPTFLEET_SOFT_DELETE_DAYS"
    manage.py fleet_location_trash s3-archive 0 --reason "scratch bucket"   # refused under SOFT_DELETE_REQUIRED

Audited as "location.soft_delete" by the command's actor.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from ckptfleet.errors import DomainError
from fleet.models import StorageLocation
from fleet.services import location_set_soft_delete


class Command(BaseCommand):
    help = "Set how many days deletions at a storage location stay recoverable in the trash."

    def add_arguments(self, parser):
        parser.add_argument("location", help="the storage location's name")
        parser.add_argument("days", help="whole days, 0 for none, or 'default'")
        parser.add_argument("--reason", required=True)

    def handle(self, *args, **options):
        location = StorageLocation.objects.filter(name=options["location"]).first()
        if location is None:
            raise CommandError(f"no storage location named {options['location']!r}")
        raw = options["days"]
        if raw == "default":
            days = None
        elif raw.isascii() and raw.isdigit():
            days = int(raw)
        else:
            raise CommandError("days must be a whole number or 'default'")
        actor = Actor.command(label="manage.py fleet_location_trash")
        try:
            done = location_set_soft_delete(location=location, days=days, reason=options["reason"], actor=actor)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        if not isinstance(done, StorageLocation):  # only a person's shortening waits; a command applies at once
            raise CommandError(f"filed as change request {done.pk}, awaiting a second person")
        self.stdout.write(f"{done.name}: deletions stay recoverable for {done.trash_days} days")
