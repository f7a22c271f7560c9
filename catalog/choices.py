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
    """Where a run is in its life (``catalog.lifecycle`` sets it; nothing else writes it)."""

    ACTIVE = "active", "Active"
    FINISHED = "finished", "Finished"
    FAILED = "failed", "Failed"
    ABANDONED = "abandoned", "Abandoned"
    DELETED = "deleted", "Finished and deleted"


# Runs that write no more checkpoints, however they ended: what "a finished run still on NVMe", its waste line
# and the tiering what-if's "ended runs" scope look at. A failed or abandoned run's checkpoints are as idle as
# a finished one's.
ENDED_STATUSES = (RunStatus.FINISHED, RunStatus.FAILED, RunStatus.ABANDONED, RunStatus.DELETED)


class RunStatusSource(models.TextChoices):
    """Who said what a run's status is. Blank: nobody yet (a run the ingest just found is active)."""

    SIDECAR = "sidecar", "Sidecar"
    API = "api", "API"
    OPERATOR = "operator", "Operator"
    INFERRED = "inferred", "Inferred"
    NONE = "", "Not set"


# Said by the job or a person: inference never overrides these (catalog.lifecycle).
EXPLICIT_SOURCES = (RunStatusSource.SIDECAR, RunStatusSource.API, RunStatusSource.OPERATOR)


class SavedSource(models.TextChoices):
    """Where a checkpoint's saved time comes from (``catalog.ages``), best first. None (NULL): nothing says when it
    was saved, so its age counts from when the catalog first saw it. (NULL rather than a blank default so that the
    column is added in place on SQLite, whose table rebuild the ownership triggers on checkpoints would break.)"""

    SIDECAR = "sidecar", "the sidecar's saved_at"
    MTIME = "mtime", "the files' modification time"
    LAST_MODIFIED = "last_modified", "the objects' LastModified"
