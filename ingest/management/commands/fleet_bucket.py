"""Register buckets as storage locations, scan them on demand, and list them.

    manage.py fleet_bucket add ckpt-eu --bucket ckpt-eu --prefix fleet/ --region eu-west-1 \\
        --credentials file:ckpt-eu-ro --tier-map GLACIER_IR=archive_instant --site aws-euw1 --every 60
    manage.py fleet_bucket add minio-lab --bucket lab --endpoint-url http://minio:9000 --addressing-style path
    manage.py fleet_bucket set ckpt-eu --recheck-days 30
    manage.py fleet_bucket scan ckpt-eu --wait
    manage.py fleet_bucket list

Credentials are a reference the workers resolve (``default``, ``profile:NAME``, ``file:NAME`` in
CKPTFLEET_S3_SECRETS_DIR); keys are never given here.
"""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from audit.actor import Actor
from catalog.models import Team
from ckptfleet.errors import DomainError
from ckptfleet.rules import name_problem
from fleet.choices import AddressingStyle, InventoryStatus, Tier
from fleet.models import Bucket, Inventory, StorageLocation
from ingest.scan import bucket_add, bucket_set, scan_start


def _tier_pair(text: str) -> tuple[str, str]:
    storage_class, sep, tier = text.partition("=")
    if not sep or not storage_class or not tier:
        raise CommandError(f"--tier-map takes CLASS=TIER (e.g. GLACIER_IR=archive_instant), not {text!r}")
    return storage_class.strip().upper(), tier.strip()


RECHECK_HELP = "HEAD every object again for its checksums when the last full pass is this old; 0: never (default 7)"


def _recheck(bucket: Bucket) -> str:
    """How often every object is HEADed again, and when it last was."""
    if not bucket.fetch_checksums:
        return "no checksums fetched"
    if not bucket.recheck_days:
        return "never rechecked"
    last = f"last {bucket.rechecked_at:%Y-%m-%d %H:%M}" if bucket.rechecked_at else "never yet"
    days = "day" if bucket.recheck_days == 1 else f"{bucket.recheck_days} days"
    return f"rechecked every {days} ({last})"


class Command(BaseCommand):
    help = "Register buckets, scan them, and list them."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="register a bucket (and prefix) as a storage location")
        add.add_argument("name", help="the location's name")
        add.add_argument("--bucket", required=True, help="the bucket's name")
        add.add_argument("--prefix", default="", help="only keys below this prefix are scanned")
        add.add_argument("--endpoint-url", default="", help="S3-compatible endpoint; empty for AWS")
        add.add_argument("--region", default="", help="the bucket's region (e.g. eu-west-1, auto)")
        add.add_argument("--addressing-style", choices=AddressingStyle.values, default=AddressingStyle.AUTO)
        add.add_argument(
            "--credentials", default="default", help="default | profile:NAME | file:NAME (default: %(default)s)"
        )
        add.add_argument("--template", default="{team}/{run}", help="layout below the prefix, e.g. {team}/{run}")
        add.add_argument("--team", default="", help="team for runs the template does not name")
        add.add_argument("--tier", choices=Tier.values, default=Tier.OBJECT_STANDARD, help="for unmapped classes")
        add.add_argument(
            "--tier-map",
            nargs="*",
            default=[],
            metavar="CLASS=TIER",
            help="storage class to tier overrides, e.g. GLACIER_IR=archive_instant",
        )
        add.add_argument("--site", default="", help="failure domain: site")
        add.add_argument("--region-domain", default="", help="failure domain: region (default: --region)")
        add.add_argument("--every", type=int, default=60, metavar="MINUTES", help="scan interval; 0: on demand only")
        add.add_argument("--no-checksums", action="store_true", help="do not HEAD new objects for their checksums")
        add.add_argument("--recheck-days", type=int, default=7, metavar="DAYS", help=RECHECK_HELP)
        add.add_argument("--inventory-report", default="", metavar="S3_URI", help="s3://bucket/prefix of S3 Inventory")
        change = sub.add_parser("set", help="change a registered bucket's settings")
        change.add_argument("name", help="the location's name")
        change.add_argument("--recheck-days", type=int, required=True, metavar="DAYS", help=RECHECK_HELP)
        scan = sub.add_parser("scan", help="scan a bucket now")
        scan.add_argument("name")
        scan.add_argument("--wait", action="store_true", help="wait until the scan is applied or failed")
        scan.add_argument("--wait-timeout", type=float, default=3600.0, metavar="SECONDS")
        sub.add_parser("list", help="list buckets and their last scans")

    def handle(self, *args, **opts):
        actor = Actor.command(label="manage.py fleet_bucket")
        try:
            if opts["action"] == "add":
                self._add(opts, actor)
            elif opts["action"] == "set":
                self._set(opts, actor)
            elif opts["action"] == "scan":
                self._scan(opts, actor)
            elif opts["action"] == "list":
                self._list()
        except DomainError as exc:
            raise CommandError(exc.message) from None

    def _add(self, opts, actor: Actor) -> None:
        team = None
        if opts["team"]:
            if problem := name_problem(opts["team"], "team", Team._meta.get_field("name").max_length):
                raise CommandError(problem)
            team, _ = Team.objects.get_or_create(name=opts["team"])
        bucket = bucket_add(
            name=opts["name"],
            bucket_name=opts["bucket"],
            prefix=opts["prefix"],
            endpoint_url=opts["endpoint_url"],
            region_name=opts["region"],
            addressing_style=opts["addressing_style"],
            credentials=opts["credentials"],
            path_template=opts["template"],
            tier=opts["tier"],
            storage_class_tiers=dict(_tier_pair(t) for t in opts["tier_map"]),
            default_team=team,
            site=opts["site"],
            region=opts["region_domain"],
            scan_every_minutes=opts["every"],
            fetch_checksums=not opts["no_checksums"],
            recheck_days=opts["recheck_days"],
            inventory_report_uri=opts["inventory_report"],
            actor=actor,
        )
        every = f"every {bucket.scan_every_minutes} min" if bucket.scan_every_minutes else "on demand only"
        self.stdout.write(f"registered {bucket} as {bucket.location.name} ({every}, {_recheck(bucket)})")

    def _set(self, opts, actor: Actor) -> None:
        location = StorageLocation.objects.filter(name=opts["name"]).first()
        if location is None:
            raise CommandError(f"no storage location named {opts['name']!r}; see `fleet_bucket list`")
        bucket = bucket_set(location=location, recheck_days=opts["recheck_days"], actor=actor)
        self.stdout.write(f"{location.name}: {_recheck(bucket)}")

    def _scan(self, opts, actor: Actor) -> None:
        location = StorageLocation.objects.filter(name=opts["name"]).first()
        if location is None:
            raise CommandError(f"no storage location named {opts['name']!r}; see `fleet_bucket list`")
        inventory = scan_start(location=location, actor=actor)
        self.stdout.write(f"scan started: inventory {inventory.pk}")
        if not opts["wait"]:
            return
        deadline = time.monotonic() + opts["wait_timeout"]
        delay = 0.2
        while True:
            inventory.refresh_from_db()
            if inventory.status in (InventoryStatus.APPLIED, InventoryStatus.FAILED):
                break
            if time.monotonic() > deadline:
                raise CommandError(f"inventory {inventory.pk} is still {inventory.status}; is a worker running?")
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        if inventory.status == InventoryStatus.FAILED:
            raise CommandError(f"scan {inventory.pk} failed: {inventory.error}")
        self.stdout.write(
            f"scan {inventory.pk} applied: {inventory.files_count} objects, +{inventory.files_added} "
            f"~{inventory.files_changed} -{inventory.files_gone}, {inventory.checkpoints_found} checkpoint copies"
        )
        if inventory.error:
            self.stdout.write(inventory.error)

    def _list(self) -> None:
        buckets = list(Bucket.objects.select_related("location", "location__last_inventory"))
        if not buckets:
            self.stdout.write("no buckets registered yet; add one with `manage.py fleet_bucket add NAME --bucket B`")
        for bucket in buckets:
            loc = bucket.location
            last: Inventory | None = loc.last_inventory
            state = f"last scan {last.status} {last.finished_at:%Y-%m-%d %H:%M}" if last and last.finished_at else ""
            every = f"every {bucket.scan_every_minutes} min" if bucket.scan_every_minutes else "on demand"
            where = f" at {bucket.endpoint_url}" if bucket.endpoint_url else ""
            self.stdout.write(
                f"{loc.name}  {bucket}{where}  {every}  {_recheck(bucket)}  credentials {bucket.credentials}  "
                f"{state or 'never scanned'}"
            )
