"""Celery tasks of the catalog: thin wrappers around ``catalog.drills``."""

from __future__ import annotations

from celery import shared_task

from catalog import drills


@shared_task(acks_late=True)
def run_restore_drills() -> dict:
    """One round of restore drills (daily, from beat): per team, a sample of trusted checkpoints read back."""
    rows = drills.run_drills()
    return {"drills": len(rows), "failed": sum(1 for r in rows if r.outcome != "passed")}
