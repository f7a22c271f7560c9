"""Which conditional delete a bucket's store honours: show it, probe the store now, or state it as an operator.

    manage.py bucket_delete_condition 7                      # what is in force at location 7, and why
    manage.py bucket_delete_condition 7 --probe              # write, conditionally delete and remove a probe object
    manage.py bucket_delete_condition 7 --set none --as olga --reason "vendor: DeleteObject ignores If-Match"
    manage.py bucket_delete_condition 7 --set auto --as olga --reason "follow the probe again"

Without versioning, the deletion executor deletes an object only under the ETag condition the store honours
("batch": DeleteObjects, "single": DeleteObject If-Match) and refuses hard deletes where it honours "none".
Each change is audited (``bucket.delete_condition``); ``--set`` needs an admin, named with ``--as``.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from audit.choices import EventSource
from ckptfleet.errors import DomainError
from fleet.choices import DeleteCondition
from fleet.models import Bucket
from fleet.s3 import S3Error
from fleet.services import bucket_probe_delete_condition, bucket_set_delete_condition


class Command(BaseCommand):
    help = "Show, probe or set which conditional delete (ETag / If-Match) a bucket's store honours."

    def add_arguments(self, parser):
        parser.add_argument("location", type=int, help="The bucket's storage location id.")
        parser.add_argument("--probe", action="store_true", help="Ask the store now (writes one small object).")
        parser.add_argument("--set", dest="setting", choices=("auto", *DeleteCondition.values))
        parser.add_argument("--as", dest="username", help="The admin stating it (for --set).")
        parser.add_argument("--reason", default="")

    def handle(self, *args, location: int, probe: bool, setting: str | None, username: str | None, reason: str, **o):
        bucket = Bucket.objects.select_related("location").filter(location_id=location).first()
        if bucket is None:
            raise CommandError(f"no bucket at location {location}")
        try:
            if probe:
                bucket = bucket_probe_delete_condition(location=bucket.location, actor=Actor.command())
            if setting is not None:
                user = get_user_model().objects.filter(username=username or "", is_active=True).first()
                if user is None:
                    raise CommandError("--set needs --as naming an active admin")
                bucket = bucket_set_delete_condition(
                    location=bucket.location,
                    setting="" if setting == "auto" else setting,
                    reason=reason,
                    actor=Actor.person(user, EventSource.COMMAND),
                )
        except (DomainError, S3Error) as exc:
            raise CommandError(str(exc)) from None
        found = bucket.get_delete_condition_display() if bucket.delete_condition else "not probed yet"
        stated = bucket.get_delete_condition_setting_display() if bucket.delete_condition_setting else "none"
        self.stdout.write(
            f"{bucket.location.name}: in force: {bucket.delete_condition_in_force or 'unknown (probed first)'}; "
            f"probe: {found}; operator's setting: {stated}"
        )
