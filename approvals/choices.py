"""The states of a change request."""

from django.db import models


class ChangeState(models.TextChoices):
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    APPLIED = "applied", "Approved and applied"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


OPEN_STATES = (ChangeState.AWAITING_APPROVAL,)
