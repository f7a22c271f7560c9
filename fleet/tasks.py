"""Celery tasks of the fleet: thin wrappers that take ids and call a service."""

from celery import shared_task

from fleet import ingest


@shared_task(acks_late=True, bind=True, max_retries=3, default_retry_delay=30)
def ingest_inventory(self, inventory_id: int) -> str:
    """Apply one received inventory. Idempotent: a second delivery finds it already claimed."""
    inventory = ingest.ingest(inventory_id, claim=self.request.id or "")
    return inventory.status if inventory else "skipped"


@shared_task(acks_late=True)
def sweep_inventories() -> dict:
    """Re-queue lost inventories, fail abandoned ones, remove old uploads (every 10 minutes, from beat)."""
    counts = ingest.sweep()
    return {"resent": counts.resent, "abandoned": counts.abandoned, "uploads_removed": counts.uploads_removed}
