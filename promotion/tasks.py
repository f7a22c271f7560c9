"""Celery tasks of promotions: thin wrappers that take a job id and call the runner.

The job's state is in the database, so every task is safe to run twice and a lost one is re-queued
by ``advance_promotions`` (beat, every minute).
"""

from celery import shared_task

from fleet.s3 import S3Error
from promotion import moves, runner


@shared_task(acks_late=True, bind=True, max_retries=5, default_retry_delay=30)
def promotion_start(self, job_id: int) -> str:
    """Begin a requested promotion: restore requests or the copies."""
    try:
        return runner.start(job_id)
    except S3Error as exc:
        if exc.transient:
            raise self.retry(exc=exc) from None
        raise


@shared_task(acks_late=True, bind=True, max_retries=5, default_retry_delay=30)
def promotion_poll(self, job_id: int) -> str:
    """Check the restores of one job; copies follow in the same task once every object is readable."""
    try:
        return runner.poll(job_id)
    except S3Error as exc:
        if exc.transient:
            raise self.retry(exc=exc) from None
        raise


@shared_task(acks_late=True, bind=True, max_retries=5, default_retry_delay=30)
def promotion_copy(self, job_id: int) -> str:
    """Copy the readable objects of one job (resumes where an earlier delivery stopped)."""
    try:
        return runner.copy(job_id, claim=self.request.id or f"copy-{job_id}")
    except S3Error as exc:
        if exc.transient:
            raise self.retry(exc=exc) from None
        raise


@shared_task(acks_late=True)
def advance_promotions() -> dict:
    """Poll the restores that are due, re-queue lost jobs, and move on verified moves (every minute, from beat)."""
    due = runner.due_jobs()
    for job_id in due["poll"]:
        promotion_poll.delay(job_id)
    for job_id in due["start"]:
        promotion_start.delay(job_id)
    for job_id in due["copy"]:
        promotion_copy.delay(job_id)
    due["verify"] = moves.due_verifying()
    for job_id in due["verify"]:
        move_copied.delay(job_id)
    return due


@shared_task(acks_late=True, bind=True, max_retries=5, default_retry_delay=30)
def move_copied(self, job_id: int) -> str:
    """Verify a move's new objects and free its source (resumes a verification a lost worker left)."""
    try:
        return moves.copied(job_id)
    except S3Error as exc:
        if exc.transient:
            raise self.retry(exc=exc) from None
        raise
