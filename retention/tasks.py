"""Celery tasks of retention: thin wrappers that take ids and call ``retention.services``."""

from __future__ import annotations

from celery import shared_task
from django.db import transaction

from retention import services, tiering_policies
from retention.models import RetentionPolicy


@shared_task(acks_late=True)
def propose_policy_deletions(policy_id: int) -> dict:
    """One policy's pass. Idempotent: checkpoints already scheduled are skipped."""
    proposal = services.policy_propose(policy_id=policy_id)
    return {"policy": policy_id, "scheduled": len(proposal.scheduled), "skipped": len(proposal.skipped)}


@shared_task(acks_late=True)
def propose_retention_deletions() -> dict:
    """Queue one pass per enabled policy (daily, from beat); each is its own task, so one failure stays local."""
    ids = list(RetentionPolicy.objects.filter(enabled=True).order_by("pk").values_list("pk", flat=True))
    for pk in ids:
        transaction.on_commit(lambda pk=pk: propose_policy_deletions.delay(pk))
    return {"policies": ids}


@shared_task(acks_late=True)
def run_tiering_policy(policy_id: int) -> dict:
    """One tiering policy's pass: asks for moves or host-copy deletions (each still checked, approved, graced)."""
    summary = tiering_policies.policy_run(policy_id=policy_id)
    return {"policy": policy_id, **summary.as_dict()}


@shared_task(acks_late=True)
def run_due_tiering_policies() -> dict:
    """Queue one pass per enabled tiering policy whose schedule has come round (beat, every 15 minutes)."""
    ids = tiering_policies.due_policy_ids()
    for pk in ids:
        transaction.on_commit(lambda pk=pk: run_tiering_policy.delay(pk))
    return {"policies": ids}
