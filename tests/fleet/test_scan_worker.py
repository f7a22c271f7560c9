"""A bucket scan through a real Celery worker process, Redis, PostgreSQL and an S3 HTTP endpoint.

The worker reaches the endpoint the way production does: through the URL stored on the Bucket row,
with credentials "default", which boto3 finds in the AWS variables the worker inherits from this
process (tests/s3.py sets them while the endpoint runs).
"""

from __future__ import annotations

import os

import pytest

from audit.actor import Actor
from catalog.models import CheckpointCopy
from fleet.choices import InventoryStatus
from fleet.models import Inventory
from ingest.scan import scan_start
from tests.conftest import wait_for
from tests.s3 import AWS_ENV

pytestmark = pytest.mark.services


def test_a_worker_scans_a_bucket_and_applies_it(s3, celery_worker_process):
    assert all(os.environ.get(k) == v for k, v in AWS_ENV.items())  # what the worker was started with
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/", classes={"*.distcp": "GLACIER_IR"})
    bucket = s3.register(name, prefix="fleet/")

    inventory = scan_start(location=bucket.location, actor=Actor.command(label="tests"))

    def finished() -> bool:
        return Inventory.objects.get(pk=inventory.pk).status in (InventoryStatus.APPLIED, InventoryStatus.FAILED)

    wait_for(finished, timeout=90, what="the worker to scan the bucket")
    inventory.refresh_from_db()
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert inventory.claimed_by  # claimed by the worker's task delivery
    assert (inventory.files_count, inventory.checkpoints_found) == (9, 4)
    states = set(CheckpointCopy.objects.filter(location=bucket.location).values_list("path", "state"))
    assert states == {
        ("llm/llama-tiny/step-100", "complete"),
        ("llm/llama-tiny/step-200", "complete"),
        ("vision/resnet-tiny/epoch=0-step=100.ckpt", "complete"),
        ("vision/resnet-tiny/epoch=1-step=200.ckpt", "complete"),
    }
