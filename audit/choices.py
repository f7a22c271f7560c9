"""Who acts and through what, as the audit trail records it."""

from django.db import models


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


class AnchorTarget(models.TextChoices):
    FILE = "file", "Signed file"
    S3 = "s3", "S3 Object Lock"


class AnchorOutcome(models.TextChoices):
    WRITTEN = "written", "Written"
    FAILED = "failed", "Failed"


class VerificationTrigger(models.TextChoices):
    SCHEDULE = "schedule", "Schedule"
    PERSON = "person", "Person"
    COMMAND = "command", "Command"
