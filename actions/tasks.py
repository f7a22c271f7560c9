"""Celery tasks of the actions: thin wrappers that take ids and call ``actions.execution``."""

from celery import shared_task

from actions import execution, reclaim, softdelete


@shared_task(acks_late=True, bind=True)
def execute_deletion(self, job_id: int) -> str:
    """Work through one running deletion job. Idempotent: its state and items are in the database.

    A delivery that finds the job ended, or finds another delivery busy with it (the batch lock),
    does nothing harmful: every batch re-reads what is still pending under the job's lock.
    """
    return execution.execute(job_id)


@shared_task(acks_late=True)
def start_due_deletions() -> dict:
    """Start the deletions whose grace period is over; resend stale running ones (every minute, from beat)."""
    return execution.start_due()


@shared_task(acks_late=True)
def restore_deletion(job_id: int) -> int:
    """Put a restored deletion's bucket objects back (its host files go back through their agents). Idempotent:
    only items still marked restoring are worked on, under the job's lock."""
    return softdelete.restore_buckets(job_id)


@shared_task(acks_late=True)
def purge_trash() -> dict:
    """Purge the trashed bucket objects whose recovery window ended (hourly, from beat)."""
    return softdelete.purge_due()


@shared_task(acks_late=True)
def record_lease_lapses() -> dict:
    """Write ``lease.lapse`` for each lease that expired unreleased (beat, every 5 minutes)."""
    from actions.leases import record_lapses

    return {"lapsed": record_lapses()}


@shared_task(acks_late=True)
def prove_reclaim(job_id: int) -> str:
    """Check against the store that what an ended deletion freed is gone or in the trash (``actions.reclaim``).
    Idempotent: the verdict is recomputed from a fresh listing each time."""
    return reclaim.prove(job_id)
