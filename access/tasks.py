"""Tasks of access: verifying the audit chain off the request, for the button on /audit/."""

from __future__ import annotations

from celery import shared_task
from django.contrib.auth import get_user_model

from access.services import audit_chain_verify
from audit.actor import Actor
from audit.choices import EventSource


@shared_task(acks_late=True)
def verify_audit_chain(user_id: int, request_id: str = "") -> dict:
    """Walk the chain for the person who asked and record the result; running it twice records it twice."""

    user = get_user_model().objects.get(pk=user_id)
    actor = Actor.person(user, EventSource.UI)
    event = audit_chain_verify(actor=actor, request_id=request_id)
    return {"event": event.pk, **event.after}
