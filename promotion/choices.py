"""Enumerations of promotions and moves: which way a copy goes, how, and where a job stands."""

from django.db import models


class Direction(models.TextChoices):
    """Which way a job moves a checkpoint copy between tiers.

    A promotion brings a copy to a hotter tier and leaves the source alone; a demotion (bucket to a
    colder bucket or class) and an offload (a host's NVMe/PFS to a bucket) free the source once the new
    copy is verified (``promotion.moves``).
    """

    PROMOTE = "promote", "Promotion"
    DEMOTE = "demote", "Demotion"
    OFFLOAD = "offload", "Offload"


MOVE_DIRECTIONS = (Direction.DEMOTE, Direction.OFFLOAD)


class Method(models.TextChoices):
    RESTORE = "restore", "Restore from an archive class (then copy, if asked)"
    COPY = "copy", "Copy between buckets or storage classes"
    AGENT_PULL = "agent_pull", "A host's agent pulls the files"
    AGENT_PUSH = "agent_push", "The host's agent uploads the files"


class JobState(models.TextChoices):
    REQUESTED = "requested", "Requested"
    RESTORING = "restoring", "Restoring from archive"
    COPYING = "copying", "Copying"
    AWAITING_AGENT = "awaiting_agent", "Awaiting the host's agent"
    VERIFYING = "verifying", "Verifying the new copy"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


OPEN_STATES = (
    JobState.REQUESTED,
    JobState.RESTORING,
    JobState.COPYING,
    JobState.AWAITING_AGENT,
    JobState.VERIFYING,
)
ENDED_STATES = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class ItemState(models.TextChoices):
    PENDING = "pending", "Archived, restore not yet asked"
    RESTORING = "restoring", "Restore under way"
    READY = "ready", "Readable, waiting to be copied"
    DONE = "done", "Done"
    BLOCKED = "blocked", "Blocked (would overwrite)"
    FAILED = "failed", "Failed"


class RestoreTier(models.TextChoices):
    """S3's retrieval options: faster costs more; Expedited is not offered for DEEP_ARCHIVE."""

    EXPEDITED = "Expedited", "Expedited (minutes, GLACIER only)"
    STANDARD = "Standard", "Standard (hours)"
    BULK = "Bulk", "Bulk (up to two days, cheapest)"
