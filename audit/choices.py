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
