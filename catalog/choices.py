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


class Importance(models.TextChoices):
    CRITICAL = "critical", "Critical"
    MILESTONE = "milestone", "Milestone"
    ROUTINE = "routine", "Routine"
    TRANSIENT = "transient", "Transient"


class RunStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    FINISHED = "finished", "Finished"
    DELETED = "deleted", "Finished and deleted"


class ActorKind(models.TextChoices):
    USER = "user", "Person"
    HOST = "host", "Host agent"
    WORKER = "worker", "Worker"
    SYSTEM = "system", "System"


class EventSource(models.TextChoices):
    UI = "ui", "Web UI"
    API = "api", "API"
    ADMIN = "admin", "Admin"
    COMMAND = "command", "Management command"
    TASK = "task", "Task"
    AGENT = "agent", "Agent"
