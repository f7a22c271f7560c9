"""Enumerations of the catalog domain."""

from django.db import models


class CopyState(models.TextChoices):
    COMPLETE = "complete", "Complete"
    PARTIAL = "partial", "Partial"
    CORRUPT = "corrupt", "Corrupt"


class Verification(models.TextChoices):
    VERIFIED = "verified", "Verified"
    UNVERIFIED = "unverified", "Unverified"
    MISMATCH = "mismatch", "Checksums disagree"
    # Copies disagree and nothing independent says which is right (PRODUCT.md, promise 10): neither is
    # trusted for recovery nor condemned; the copy keeps the state its formats gave it.
    DISPUTED = "disputed", "Disputed"


class VerificationBasis(models.TextChoices):
    """What decided a copy's verification, strongest first (``catalog.verification``)."""

    MANIFEST = "manifest", "A checksum written at save time"
    SOURCE = "source", "The source's checksum from before the copy"
    FORMAT = "format", "The format's own checks"
    MAJORITY = "majority", "A majority of the copies"
    PEERS = "peers", "The other copies agree"
    NONE = "", "Nothing yet"


class Importance(models.TextChoices):
    CRITICAL = "critical", "Critical"
    MILESTONE = "milestone", "Milestone"
    ROUTINE = "routine", "Routine"
    TRANSIENT = "transient", "Transient"


class RunStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    FINISHED = "finished", "Finished"
    DELETED = "deleted", "Finished and deleted"
