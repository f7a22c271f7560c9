"""Hosts, their tokens, storage locations and the inventories reported for them."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from fleet.choices import InventorySource, InventoryStatus, LocationKind, Tier


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
