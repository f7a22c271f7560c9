"""Enumerations of promotions: how a copy is brought to a hotter tier, and where a job stands."""

from django.db import models


class Method(models.TextChoices):
    RESTORE = "restore", "Restore from an archive class (then copy, if asked)"
    COPY = "copy", "Copy between buckets or storage classes"
    AGENT_PULL = "agent_pull", "A host's agent pulls the files"


class JobState(models.TextChoices):
    REQUESTED = "requested", "Requested"
    RESTORING = "restoring", "Restoring from archive"
    COPYING = "copying", "Copying"
    AWAITING_AGENT = "awaiting_agent", "Awaiting the host's agent"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


OPEN_STATES = (JobState.REQUESTED, JobState.RESTORING, JobState.COPYING, JobState.AWAITING_AGENT)
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
