"""Ingestion through a real Celery worker process, Redis and PostgreSQL."""

from __future__ import annotations

from catalog.models import CheckpointCopy
from fleet.choices import InventoryStatus
from fleet.models import Inventory
from tests.conftest import wait_for
from tests.helpers.ingest import URL, dcp


def test_a_worker_ingests_an_uploaded_inventory(celery_worker_process, make_host, client):
    kit = make_host()
    response = client.post(
        URL,
        data=kit.body(dcp(100) + dcp(200, missing=0)),
        content_type="application/x-ndjson",
        HTTP_CONTENT_ENCODING="gzip",
        **kit.auth(),
    )
    assert response.status_code == 202
    inventory_id = response.json()["id"]

    def applied() -> bool:
        return Inventory.objects.get(pk=inventory_id).status in (InventoryStatus.APPLIED, InventoryStatus.FAILED)

    wait_for(applied, timeout=60, what="the worker to apply the inventory")
    inventory = Inventory.objects.get(pk=inventory_id)
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert inventory.claimed_by  # claimed by the worker's task delivery
    states = dict(CheckpointCopy.objects.values_list("checkpoint__step", "state"))
    assert states == {100: "complete", 200: "partial"}
