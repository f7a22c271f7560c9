"""Celery tasks of the fleet: thin wrappers that take ids and call a service.

The checksum phase's functions are looked up on their module (``head_chunks.head_backoff``) when a task runs.
"""

from celery import shared_task

from ingest.inventory.run import ingest
from ingest.inventory.sweep import sweep
from ingest.scan import head_chunks
from ingest.scan.head_plan import head_chunks_resend
from ingest.scan.run import scan_run
from ingest.scan.start import scan_due
from spend.usage import usage_carry_forward_all


@shared_task(acks_late=True, bind=True, max_retries=3, default_retry_delay=30)
def ingest_inventory(self, inventory_id: int) -> str:
    """Apply one received inventory. Idempotent: a second delivery finds it already claimed."""
    inventory = ingest(inventory_id, claim=self.request.id or "")
    return inventory.status if inventory else "skipped"


@shared_task(acks_late=True)
def sweep_inventories() -> dict:
    """Re-queue lost inventories and stalled HEAD chunks, fail abandoned ones, remove old uploads (every 10 minutes)."""
    counts = sweep()
    return {
        "resent": counts.resent,
        "abandoned": counts.abandoned,
        "uploads_removed": counts.uploads_removed,
        "head_chunks_resent": head_chunks_resend(),
    }


@shared_task(acks_late=True, bind=True)
def scan_bucket(self, inventory_id: int) -> str:
    """List one bucket and apply the snapshot. Idempotent: a second delivery finds the scan claimed.

    S3 requests are retried with backoff inside botocore; a scan that still fails is recorded as
    failed, with the reason, and the next scheduled or on-demand scan tries again.
    """
    # The checksum phase's chunks follow the scan to its queue: the workers that take scans take them.
    queue = (self.request.delivery_info or {}).get("routing_key") or None
    inventory = scan_run(inventory_id, claim=self.request.id or "", queue=queue)
    return inventory.status if inventory else "skipped"


@shared_task(acks_late=True, bind=True, max_retries=head_chunks.HEAD_RETRIES)
def head_chunk(self, chunk_id: int) -> str:
    """HEAD one chunk of a scan's checksum phase, write and verify it. Idempotent: a done chunk is skipped.

    Throttling, 5xx and timeouts (after botocore's own retries) retry the chunk with exponential
    backoff and jitter, ``HEAD_RETRIES`` times; then it is given up and its objects stay unverified.
    """
    final = self.request.retries >= self.max_retries
    try:
        return head_chunks.head_chunk_run(chunk_id, final=final, worker=self.request.hostname or "")
    except head_chunks.ChunkRetry as exc:
        raise self.retry(countdown=head_chunks.head_backoff(self.request.retries), exc=exc.error) from None


@shared_task(acks_late=True)
def scan_due_buckets() -> dict:
    """Start the scans that are due by each bucket's schedule (every minute, from beat)."""
    started = scan_due()
    return {"started": [inventory.pk for inventory in started]}


@shared_task(acks_late=True)
def carry_usage_forward() -> dict:
    """Carry every location's usage forward to today (UTC), so a day without an inventory still costs (hourly)."""

    return usage_carry_forward_all()
