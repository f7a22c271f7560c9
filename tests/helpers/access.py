"""Access tests: a bucket whose scan is already running, so that a permitted scan-now touches no network."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from audit.actor import Actor
from fleet.choices import InventoryStatus
from fleet.models import Inventory
from ingest.scan import bucket_add


def bucket_with_a_running_scan():
    """A bucket whose scan is running: a permitted scan-now answers "already running", touching no network."""
    bucket = bucket_add(
        name="s3:ckpt-eu",
        bucket_name="ckpt-eu",
        prefix="fleet/",
        endpoint_url="http://127.0.0.1:9",
        region_name="eu-west-1",
        actor=Actor.command(label="tests"),
    )
    now = timezone.now()
    Inventory.objects.create(
        location=bucket.location,
        host=None,
        source="bucket_listing",
        status=InventoryStatus.PROCESSING,
        taken_at=now - timedelta(minutes=1),
        started_at=now,
    )
    return bucket.location
