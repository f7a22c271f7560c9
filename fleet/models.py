"""Hosts, their tokens, storage locations and the inventories reported for them."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from fleet.choices import (
    DEFAULT_STORAGE_CLASS_TIERS,
    AddressingStyle,
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

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


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

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["host", "root_path"], name="location_host_root_unique"),
            models.CheckConstraint(
                condition=~Q(kind__in=[LocationKind.NVME, LocationKind.PFS])
                | (Q(host__isnull=False) & Q(root_path__startswith="/")),
                name="location_host_kind_has_host_and_absolute_root",
            ),
        ]

    def __str__(self) -> str:
        return self.name

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

    class Meta:
        ordering = ["location__name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(scan_every_minutes=0) | Q(scan_every_minutes__gte=5), name="bucket_scan_interval_sane"
            ),
        ]

    def __str__(self) -> str:
        return f"s3://{self.bucket_name}/{self.prefix}"

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
