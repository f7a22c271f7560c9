"""Enumerations of the fleet domain."""

from django.db import models


class LocationKind(models.TextChoices):
    NVME = "nvme", "Host NVMe"
    PFS = "pfs", "Parallel file system"
    BUCKET = "bucket", "Object storage bucket"


class Tier(models.TextChoices):
    """Where bytes sit, hottest first. Buckets map their storage classes onto these."""

    NVME = "nvme", "NVMe (GPU host)"
    PFS = "pfs", "Parallel file system"
    OBJECT_STANDARD = "object_standard", "Object storage, standard"
    OBJECT_INFREQUENT = "object_infrequent", "Object storage, infrequent access"
    ARCHIVE_INSTANT = "archive_instant", "Archive, instant retrieval"
    ARCHIVE = "archive", "Archive (restore in minutes to hours)"
    DEEP_ARCHIVE = "deep_archive", "Deep archive (restore in hours)"


class InventorySource(models.TextChoices):
    AGENT = "agent", "Host agent"
    BUCKET_LISTING = "bucket_listing", "Bucket listing"
    S3_INVENTORY = "s3_inventory", "S3 Inventory report"


class InventoryStatus(models.TextChoices):
    RECEIVED = "received", "Received"
    PROCESSING = "processing", "Processing"
    APPLIED = "applied", "Applied"
    FAILED = "failed", "Failed"
