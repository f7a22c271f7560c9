"""Reading the audit trail for pages other than the trail itself."""

from __future__ import annotations

from django.db.models import QuerySet

from audit.models import AuditEvent

REFUSED_TASK = "task.refused"


def refused_task_messages(*, limit: int = 10) -> QuerySet[AuditEvent]:
    """The newest task messages refused after too many deliveries (ckptfleet.deliveries), newest first."""
    return AuditEvent.objects.filter(action=REFUSED_TASK).order_by("-at", "-pk")[:limit]
