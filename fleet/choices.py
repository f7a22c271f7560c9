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


class AddressingStyle(models.TextChoices):
    AUTO = "auto", "Automatic"
    PATH = "path", "Path-style (endpoint/bucket/key)"
    VIRTUAL = "virtual", "Virtual-hosted (bucket.endpoint/key)"


class DeleteCondition(models.TextChoices):
    """Which conditional delete a bucket's store honours (``fleet.s3.probe_conditional_delete``): an object
    without versioning is deleted only if its ETag is still the one checked, or it is not hard-deleted at all."""

    BATCH = "batch", "honoured by DeleteObjects (an ETag per key)"
    SINGLE = "single", "honoured by DeleteObject (If-Match) only, one request per object"
    NONE = "none", "not honoured: hard deletes without versioning are refused"


# Storage classes of S3 and the S3-compatible stores, mapped to tiers. A bucket may override any of these.
DEFAULT_STORAGE_CLASS_TIERS: dict[str, str] = {
    "STANDARD": Tier.OBJECT_STANDARD,
    "REDUCED_REDUNDANCY": Tier.OBJECT_STANDARD,
    "EXPRESS_ONEZONE": Tier.OBJECT_STANDARD,
    "INTELLIGENT_TIERING": Tier.OBJECT_STANDARD,
    "STANDARD_IA": Tier.OBJECT_INFREQUENT,
    "ONEZONE_IA": Tier.OBJECT_INFREQUENT,
    "GLACIER_IR": Tier.ARCHIVE_INSTANT,
    "GLACIER": Tier.ARCHIVE,
    "DEEP_ARCHIVE": Tier.DEEP_ARCHIVE,
    "OUTPOSTS": Tier.OBJECT_STANDARD,
    "SNOW": Tier.OBJECT_STANDARD,
    # Google Cloud Storage (XML API), Azure (through S3 gateways), Ceph RGW and MinIO names.
    "NEARLINE": Tier.OBJECT_INFREQUENT,
    "COLDLINE": Tier.ARCHIVE_INSTANT,
    "ARCHIVE": Tier.DEEP_ARCHIVE,
    "MULTI_REGIONAL": Tier.OBJECT_STANDARD,
    "REGIONAL": Tier.OBJECT_STANDARD,
    "HOT": Tier.OBJECT_STANDARD,
    "COOL": Tier.OBJECT_INFREQUENT,
    "COLD": Tier.ARCHIVE_INSTANT,
}
