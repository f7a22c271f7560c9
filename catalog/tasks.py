"""Celery tasks of the catalog: thin wrappers around its services."""

from __future__ import annotations

from celery import shared_task

from catalog import drills
from catalog.lifecycle import runs_infer_ended


@shared_task(acks_late=True)
def infer_ended_runs() -> dict:
    """Mark runs idle for CKPTFLEET_RUN_IDLE_DAYS finished, source "inferred" (daily, from beat). Idempotent."""
    ended = runs_infer_ended()
    return {"ended": len(ended), "runs": ended[:100]}


@shared_task(acks_late=True)
def run_restore_drills() -> dict:
    """One round of restore drills (daily, from beat): per team, a sample of trusted checkpoints read back."""
    rows = drills.run_drills()
    return {"drills": len(rows), "failed": sum(1 for r in rows if r.outcome != "passed")}
