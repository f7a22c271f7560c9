"""Celery tasks of the actions: thin wrappers that take ids and call ``actions.execution``."""

from celery import shared_task

from actions import execution


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
