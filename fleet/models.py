"""Hosts, their tokens, storage locations and the inventories reported for them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from fleet.choices import (
    DEFAULT_STORAGE_CLASS_TIERS,
    AddressingStyle,
    DeleteCondition,
    InventorySource,
    InventoryStatus,
    LocationKind,
    Tier,
)


class Host(models.Model):
    """A GPU server or file-system gateway that runs the agent. Its failure domain is itself, its site and region."""

    name = models.CharField(max_length=253, unique=True)
    site = models.CharField(max_length=100, blank=True)
    region = models.CharField(max_length=100, blank=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    # An operator's word that the host is down (fleet.services.host_mark_down): its copies drop out of the
    # restore ranking, whatever its agent last said.
    down_since = models.DateTimeField(null=True, blank=True)
    down_reason = models.TextField(blank=True)
    down_label = models.CharField(max_length=200, blank=True, help_text="Who marked it down.")
    # The GPUs the host has, from its registration (``fleet_host add --gpus``, ``fleet_host set-gpus``): a run's
    # GPU count when neither an operator, its sidecar nor its checkpoints' world size says (catalog.recovery_point).
    gpus = models.PositiveIntegerField(null=True, blank=True, help_text="GPUs on the host, from its registration.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def marked_down(self) -> bool:
        return self.down_since is not None


class HostToken(models.Model):
    """A credential that lets one host report inventories for its own locations only.

    Only a sha256 of the token is stored: tokens are 256-bit random values, so a slow hash adds
    nothing. ``prefix`` is the public part used to find the row without a scan.
    """

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="tokens")
    prefix = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        state = "revoked" if self.revoked_at else "active"
        return f"{self.host.name} token {self.prefix}… ({state})"


def trash_days_of(soft_delete_days: int | None) -> int:
    """A location's recovery window in days from its own setting: None is the default; a 0 set before
    CKPTFLEET_SOFT_DELETE_REQUIRED was turned on does not turn the trash off, the default applies."""
    if soft_delete_days is None or (soft_delete_days == 0 and settings.SOFT_DELETE_REQUIRED):
        return settings.SOFT_DELETE_DAYS
    return soft_delete_days


class StorageLocationQuerySet(models.QuerySet):
    def locked(self):
        """These locations locked for work at them (an ingest, a scan, a deletion, a rollup), until the transaction
        ends: ``FOR NO KEY UPDATE`` on PostgreSQL, which excludes every other worker's lock on the row but not the
        key-share lock a new row referencing the location takes (a deletion item, a copy, a usage row). With ``FOR
        UPDATE`` a transaction that had locked a checkpoint and then inserted rows at the location deadlocked with a
        worker that held the location and then touched that checkpoint."""
        return self.select_for_update(no_key=True)


class StorageLocation(models.Model):
    """A place checkpoints live: a host's NVMe root, a parallel-FS mount, or (later) a bucket and prefix.

    ``path_template`` says how runs and teams are laid out below the root, e.g. ``{team}/{run}``;
    a sidecar manifest next to a checkpoint overrides it.
    """

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=16, choices=LocationKind.choices)
    tier = models.CharField(max_length=32, choices=Tier.choices)
    host = models.ForeignKey(Host, on_delete=models.PROTECT, null=True, blank=True, related_name="locations")
    root_path = models.CharField(max_length=1024, blank=True)
    path_template = models.CharField(max_length=200, default="{team}/{run}")
    default_team = models.ForeignKey("catalog.Team", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    site = models.CharField(max_length=100, blank=True, help_text="Failure domain; defaults to the host's site.")
    region = models.CharField(max_length=100, blank=True, help_text="Failure domain; defaults to the host's.")
    created_at = models.DateTimeField(auto_now_add=True)
    last_inventory = models.ForeignKey("Inventory", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    last_applied_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the newest applied inventory was taken: every present file was seen then.",
    )
    # The file system under a host root, as its agent measured it (statvfs) with its last inventory; empty
    # until an agent that reports it sends one (older agents do not).
    fs_size_bytes = models.BigIntegerField(null=True, blank=True, help_text="Size of the file system, bytes.")
    fs_free_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="Bytes a writer can still use there (statvfs f_bavail)."
    )
    fs_reported_at = models.DateTimeField(null=True, blank=True, help_text="When the agent measured them.")
    soft_delete_days = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Days an executed deletion stays recoverable in the trash here; empty: the default "
        "(CKPTFLEET_SOFT_DELETE_DAYS); 0: deleted at once (refused when CKPTFLEET_SOFT_DELETE_REQUIRED=1).",
    )

    objects = StorageLocationQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["host", "root_path"], name="location_host_root_unique"),
            models.CheckConstraint(
                condition=~Q(kind__in=[LocationKind.NVME, LocationKind.PFS])
                | (Q(host__isnull=False) & Q(root_path__startswith="/")),
                name="location_host_kind_has_host_and_absolute_root",
            ),
            models.CheckConstraint(
                condition=(Q(fs_size_bytes__isnull=True) & Q(fs_free_bytes__isnull=True))
                | (
                    Q(fs_size_bytes__isnull=False, fs_free_bytes__isnull=False)
                    & Q(fs_free_bytes__gte=0)
                    & Q(fs_free_bytes__lte=models.F("fs_size_bytes"))
                ),
                name="location_fs_free_within_size",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def fs_used_bytes(self) -> int | None:
        """Bytes in use on the file system (size less what a writer can use), when the agent reported them."""
        if self.fs_size_bytes is None or self.fs_free_bytes is None:
            return None
        return self.fs_size_bytes - self.fs_free_bytes

    @property
    def fs_used_percent(self) -> float | None:
        used = self.fs_used_bytes
        if used is None or not self.fs_size_bytes:
            return None
        return round(100 * used / self.fs_size_bytes, 1)

    @property
    def trash_days(self) -> int:
        """The recovery window of deletions here, in days (0: none), the default filled in."""
        return trash_days_of(self.soft_delete_days)

    @property
    def failure_site(self) -> str:
        return self.site or (self.host.site if self.host_id else "")

    @property
    def failure_region(self) -> str:
        return self.region or (self.host.region if self.host_id else "")


class Bucket(models.Model):
    """How to reach and read the object-storage bucket (and prefix) behind a storage location.

    Credentials are a reference, never a secret: ``default`` is boto3's own chain (environment,
    shared files, instance role), ``profile:NAME`` a named profile, ``file:NAME`` a JSON file
    ``NAME`` in ``CKPTFLEET_S3_SECRETS_DIR`` holding the keys.
    """

    location = models.OneToOneField(StorageLocation, on_delete=models.CASCADE, primary_key=True, related_name="bucket")
    endpoint_url = models.URLField(blank=True, help_text="Empty for AWS; else the S3-compatible endpoint.")
    region_name = models.CharField(max_length=40, blank=True)
    bucket_name = models.CharField(max_length=63)
    prefix = models.CharField(max_length=1024, blank=True, help_text="Only keys below this prefix are scanned.")
    addressing_style = models.CharField(max_length=8, choices=AddressingStyle.choices, default=AddressingStyle.AUTO)
    credentials = models.CharField(max_length=200, default="default")
    storage_class_tiers = models.JSONField(
        default=dict, blank=True, help_text="Overrides of the default storage class to tier mapping."
    )
    scan_every_minutes = models.PositiveIntegerField(default=60, help_text="0: only on demand.")
    fetch_checksums = models.BooleanField(
        default=True, help_text="HEAD new or changed objects for their stored checksums (one request each)."
    )
    inventory_report_uri = models.CharField(
        max_length=1024,
        blank=True,
        help_text="s3://bucket/prefix of this bucket's S3 Inventory reports; when set, scans read the newest "
        "report instead of listing.",
    )
    versioning = models.CharField(max_length=16, blank=True, help_text="As the store last reported it.")
    object_lock = models.BooleanField(default=False, help_text="Object Lock enabled, as last reported.")
    # Bit rot and a store's own repairs do not change an ETag: only a HEAD of every object now and then
    # sees a checksum that changed or went, and refreshes when each one was last confirmed.
    recheck_days = models.PositiveSmallIntegerField(
        default=7, help_text="HEAD every object again when the last full pass is this many days old; 0: never."
    )
    rechecked_at = models.DateTimeField(
        null=True, blank=True, help_text="When the scan that HEADed every object (the last full pass) was applied."
    )
    abort_uploads_days = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="An AbortIncompleteMultipartUpload lifecycle rule covering the prefix aborts uploads after this "
        "many days, as the last scan read it; 0: no such rule; empty: not known (not read, or refused).",
    )
    # Without versioning a delete names no version: only an ETag condition the store honours keeps an object
    # rewritten after its last check from being deleted. Probed once (``fleet.s3.probe_conditional_delete``),
    # when a deletion first needs it or on demand; an operator's setting overrides what the probe found.
    delete_condition = models.CharField(
        max_length=8,
        choices=DeleteCondition.choices,
        blank=True,
        help_text="Which conditional delete the store honoured when probed; empty: not probed yet.",
    )
    delete_condition_probed_at = models.DateTimeField(null=True, blank=True)
    delete_condition_setting = models.CharField(
        max_length=8,
        choices=DeleteCondition.choices,
        blank=True,
        help_text="An operator's override of the probe's answer; empty: as probed.",
    )

    class Meta:
        ordering = ["location__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(scan_every_minutes=0) | Q(scan_every_minutes__gte=5), name="bucket_scan_interval_sane"
            ),
        ]

    def __str__(self) -> str:
        return f"s3://{self.bucket_name}/{self.prefix}"

    @property
    def delete_condition_in_force(self) -> str:
        """The conditional delete the executor relies on: the operator's setting, else the probe's; "" unknown."""
        return self.delete_condition_setting or self.delete_condition

    def tier_of(self, storage_class: str) -> str:
        storage_class = (storage_class or "STANDARD").upper()
        return self.storage_class_tiers.get(storage_class) or DEFAULT_STORAGE_CLASS_TIERS.get(
            storage_class, self.location.tier
        )


class MultipartUpload(models.Model):
    """An incomplete multipart upload found in a bucket: bytes billed for parts that make no object."""

    location = models.ForeignKey(StorageLocation, on_delete=models.CASCADE, related_name="multipart_uploads")
    key = models.TextField()
    upload_id = models.CharField(max_length=1024)
    initiated_at = models.DateTimeField(null=True, blank=True)
    storage_class = models.CharField(max_length=32, blank=True)
    parts = models.IntegerField(null=True, blank=True)
    bytes = models.BigIntegerField(null=True, blank=True)
    first_seen_at = models.DateTimeField()
    gone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["location", "key"]
        constraints = [
            models.UniqueConstraint(fields=["location", "upload_id"], name="multipart_location_upload_unique"),
        ]

    def __str__(self) -> str:
        return f"incomplete upload of {self.key} at {self.location}"


class ObjectVersion(models.Model):
    """A non-current version (or delete marker) found in a versioned bucket: bytes billed that no listing shows.

    Recorded by each scan of a bucket with versioning enabled or suspended (``ListObjectVersions``);
    ``gone_at`` is set when a later scan no longer finds it (a lifecycle rule or a person removed it).
    A delete marker has no bytes; it is kept because it hides the object whose versions remain.
    """

    location = models.ForeignKey(StorageLocation, on_delete=models.CASCADE, related_name="object_versions")
    key = models.TextField()
    version_id = models.CharField(max_length=1024)
    size = models.BigIntegerField()
    last_modified = models.DateTimeField()
    etag = models.CharField(max_length=200, blank=True)
    storage_class = models.CharField(max_length=32, blank=True)
    delete_marker = models.BooleanField(default=False)
    first_seen_at = models.DateTimeField()
    gone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["location", "key", "-last_modified"]
        constraints = [
            models.UniqueConstraint(fields=["location", "key", "version_id"], name="objectversion_unique"),
            models.CheckConstraint(condition=models.Q(size__gte=0), name="objectversion_size_nonnegative"),
        ]
        indexes = [models.Index(fields=["location", "gone_at"], name="objectversion_present")]

    def __str__(self) -> str:
        kind = "delete marker" if self.delete_marker else "non-current version"
        return f"{kind} {self.version_id} of {self.key} at {self.location}"


class Inventory(models.Model):
    """One report of everything at one storage location: a full snapshot, applied all or nothing."""

    location = models.ForeignKey(StorageLocation, on_delete=models.CASCADE, related_name="inventories")
    host = models.ForeignKey(Host, on_delete=models.SET_NULL, null=True, blank=True, related_name="inventories")
    source = models.CharField(max_length=20, choices=InventorySource.choices, default=InventorySource.AGENT)
    status = models.CharField(
        max_length=12, choices=InventoryStatus.choices, default=InventoryStatus.RECEIVED, db_index=True
    )
    agent = models.CharField(max_length=100, blank=True)
    upload = models.FileField(upload_to="inventories/%Y/%m/%d/", blank=True)
    upload_bytes = models.BigIntegerField(default=0)
    taken_at = models.DateTimeField(null=True, blank=True, help_text="When the agent started the walk.")
    received_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=64, blank=True, help_text="The task delivery that is applying it.")
    finished_at = models.DateTimeField(null=True, blank=True)
    files_count = models.BigIntegerField(default=0)
    bytes_total = models.BigIntegerField(default=0)
    files_added = models.BigIntegerField(default=0)
    files_changed = models.BigIntegerField(default=0)
    files_gone = models.BigIntegerField(default=0)
    checkpoints_found = models.IntegerField(
        default=0, help_text="Checkpoint copies present at the location once applied."
    )
    error = models.TextField(blank=True)
    error_line = models.BigIntegerField(null=True, blank=True)
    # A bucket scan's checksum phase: the objects it added or changed, HEADed after the snapshot is applied
    # in chunks (``HeadChunk``) that any worker may take. Zero objects and no finish time: no such phase.
    checksums_total = models.BigIntegerField(default=0, help_text="Objects to HEAD for their stored checksums.")
    checksums_done = models.BigIntegerField(default=0, help_text="Of those, HEADed (or given up on) so far.")
    checksums_failed = models.BigIntegerField(
        default=0, help_text="Of those, objects whose HEAD failed for good: they stay unverified."
    )
    checksums_finished_at = models.DateTimeField(
        null=True, blank=True, help_text="When the last chunk of the checksum phase finished."
    )

    class Meta:
        ordering = ["-received_at", "-id"]
        verbose_name_plural = "inventories"
        indexes = [models.Index(fields=["location", "-received_at"], name="inventory_location_recent")]
        constraints = [
            # One scan of a bucket at a time: the database refuses a second, not a race of checks.
            models.UniqueConstraint(
                fields=["location"],
                condition=Q(status__in=[InventoryStatus.RECEIVED, InventoryStatus.PROCESSING])
                & ~Q(source=InventorySource.AGENT),
                name="inventory_one_active_scan_per_location",
            ),
            models.CheckConstraint(
                condition=~Q(status=InventoryStatus.FAILED) | ~Q(error=""), name="inventory_failed_has_error"
            ),
        ]

    def __str__(self) -> str:
        return f"inventory {self.pk} of {self.location} ({self.status})"

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds()
        return None

    @property
    def checksums_running(self) -> bool:
        """Applied, and the stored checksums of what it added or changed are still being fetched."""
        return self.status == InventoryStatus.APPLIED and self.checksums_total > 0 and not self.checksums_finished_at


class HeadChunkState(models.TextChoices):
    PENDING = "pending", "Waiting or running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class HeadChunk(models.Model):
    """Up to ``ingest.scan.HEAD_CHUNK`` objects of one applied scan to HEAD for their stored checksums.

    ``items`` is the list of ``[key below the prefix, ETag listed]``. A task HEADs them (conditional on
    the ETag), then, under the location's lock and in one transaction, writes what the store said to
    the shard files still carrying that ETag, verifies their checkpoints again and marks the chunk
    done (a compare-and-swap from pending, so a second delivery writes nothing). A store that keeps
    failing (throttling, 5xx, timeouts) is retried with backoff; after the last retry the chunk is
    marked failed and its objects stay unverified. Objects refused for good (AccessDenied) are
    counted in ``failed`` and not retried.
    """

    inventory = models.ForeignKey(Inventory, on_delete=models.CASCADE, related_name="head_chunks")
    location = models.ForeignKey(StorageLocation, on_delete=models.CASCADE, related_name="+")
    seq = models.IntegerField(help_text="The chunk's place in its scan, from 0.")
    items = models.JSONField(
        help_text="[key below the prefix, ETag listed] of each object; emptied once done without failures."
    )
    size = models.IntegerField(help_text="Objects in the chunk.")
    write_lock_state = models.BooleanField(
        default=True, help_text="Write HEAD's Object Lock state (False: the listing or report carried it)."
    )
    state = models.CharField(max_length=8, choices=HeadChunkState.choices, default=HeadChunkState.PENDING)
    attempts = models.IntegerField(default=0)
    written = models.IntegerField(default=0, help_text="Shard files updated.")
    copies = models.IntegerField(default=0, help_text="Checkpoint copy verdicts written by re-verification.")
    failed = models.IntegerField(default=0, help_text="Objects whose HEAD failed for good.")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    done_by = models.CharField(max_length=200, blank=True, help_text="The worker that finished it.")

    class Meta:
        ordering = ["inventory", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["inventory", "seq"], name="headchunk_inventory_seq_unique"),
            models.CheckConstraint(
                condition=Q(size__gt=0) & Q(failed__gte=0) & Q(failed__lte=models.F("size")),
                name="headchunk_counts_sane",
            ),
        ]
        indexes = [models.Index(fields=["state", "created_at"], name="headchunk_state_created")]

    def __str__(self) -> str:
        return f"HEAD chunk {self.seq} of inventory {self.inventory_id} ({self.size} objects, {self.state})"


class PriceBasis(models.TextChoices):
    """How a price was entered. Every point is also stored per GiB-month, which is what spend uses."""

    GIB_MONTH = "gib_month", "per GiB-month"
    TIB_MONTH = "tib_month", "per TiB-month"
    HOST_MONTH = "host_month", "per host-month of its drives"


_EVERY_OF_KIND = {
    LocationKind.NVME: "every host NVMe root",
    LocationKind.PFS: "every parallel file system",
    LocationKind.BUCKET: "every bucket",
}
_NEVER_EDITED = "price points are never edited or deleted: add a new point with its effective date"


class PricePointQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError(_NEVER_EDITED)

    def delete(self):
        raise PermissionError(_NEVER_EDITED)


class PricePoint(models.Model):
    """The price of storing one GiB for one month on a tier (and storage class), from a day on.

    A point applies to every location of a kind (``kind`` empty: of any kind), to the locations of
    one host, or to one location. Where several apply, the narrowest scope wins (location, host,
    kind, any kind) and, within a scope, an exact storage class before "any class"; among points
    of the same scope the newest one in force that day wins. A change of price is a new point with
    its own ``effective_from`` (a UTC day): earlier days keep the price they had, so spend of the
    past never moves. Points are never edited in place.

    ``price_per_gib_month`` is what spend uses (1 GiB = 2**30 bytes; a month is the calendar month
    the day falls in). ``entered_price`` and ``basis`` keep what a person typed: a price per
    TiB-month, or the monthly cost of a host's drives with their capacity, from which the per-GiB
    price was derived.
    """

    kind = models.CharField(max_length=16, choices=LocationKind.choices, blank=True, help_text="Empty: any kind.")
    tier = models.CharField(max_length=32, choices=Tier.choices)
    storage_class = models.CharField(max_length=32, blank=True, help_text="Empty: any storage class of the tier.")
    location = models.ForeignKey(
        StorageLocation, on_delete=models.PROTECT, null=True, blank=True, related_name="price_points"
    )
    host = models.ForeignKey(Host, on_delete=models.PROTECT, null=True, blank=True, related_name="price_points")
    price_per_gib_month = models.DecimalField(max_digits=20, decimal_places=12)
    currency = models.CharField(max_length=3, default="USD")
    basis = models.CharField(max_length=12, choices=PriceBasis.choices, default=PriceBasis.GIB_MONTH)
    entered_price = models.DecimalField(max_digits=20, decimal_places=6, help_text="As entered, in its basis.")
    host_capacity_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="For a price per host-month: the capacity of the host's drives."
    )
    effective_from = models.DateField(help_text="The first UTC day the price applies to.")
    source = models.TextField(blank=True, help_text="Where the price comes from: a list price, a contract, a quote.")
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True)

    objects = PricePointQuerySet.as_manager()

    class Meta:
        ordering = ["tier", "kind", "storage_class", "-effective_from", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(price_per_gib_month__gte=0) & Q(entered_price__gte=0), name="pricepoint_price_not_negative"
            ),
            models.CheckConstraint(
                condition=Q(location__isnull=True) | Q(host__isnull=True), name="pricepoint_one_scope"
            ),
            models.CheckConstraint(
                condition=~Q(basis=PriceBasis.HOST_MONTH) | Q(host_capacity_bytes__gt=0),
                name="pricepoint_host_month_has_capacity",
            ),
            models.UniqueConstraint(
                fields=["location", "tier", "storage_class", "effective_from"],
                condition=Q(location__isnull=False),
                name="pricepoint_location_day_unique",
            ),
            models.UniqueConstraint(
                fields=["host", "tier", "storage_class", "effective_from"],
                condition=Q(host__isnull=False),
                name="pricepoint_host_day_unique",
            ),
            models.UniqueConstraint(
                fields=["kind", "tier", "storage_class", "effective_from"],
                condition=Q(location__isnull=True, host__isnull=True),
                name="pricepoint_kind_day_unique",
            ),
        ]

    def __str__(self) -> str:
        price = f"{self.price_per_gib_month.normalize():f} {self.currency}/GiB-month"
        return f"{self.scope_label}, {self.tier_label}: {price} from {self.effective_from}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError(_NEVER_EDITED)
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError(_NEVER_EDITED)

    @property
    def scope_label(self) -> str:
        if self.location_id:
            return f"location {self.location}"
        if self.host_id:
            return f"host {self.host}"
        return _EVERY_OF_KIND.get(self.kind, "every location")

    @property
    def tier_label(self) -> str:
        label = Tier(self.tier).label
        return f"{label} ({self.storage_class})" if self.storage_class else label
