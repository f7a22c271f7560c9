"""The lock a worker holds on a storage location while it works there (ingest, scan, deletion, rollup).

It must keep other workers out of the location, and must not stop a person's transaction from writing rows that
point at the location. With ``FOR UPDATE`` it did: scheduling a deletion (the checkpoint locked first, the items
pointing at the location checked at commit) deadlocked with a worker that held the location and then touched the
same checkpoint (seen in tests/actions/test_execution_worker.py). ``StorageLocation.objects.locked()`` takes
``FOR NO KEY UPDATE``.
"""

from __future__ import annotations

import threading

import pytest
from django.db import OperationalError, connection, connections, transaction

from actions import services
from actions.models import DeletionItem
from fleet.models import StorageLocation
from tests.actions.conftest import build_fleet
from tests.helpers.deletion import OPERATOR
from tests.helpers.locks import held_elsewhere


@pytest.mark.django_db(transaction=True)
def test_a_deletion_is_scheduled_while_a_worker_holds_its_location_and_workers_still_exclude_each_other():
    if connection.vendor != "postgresql":
        pytest.skip("row locks between connections: this runs in the PostgreSQL pass")
    fleet = build_fleet()
    with held_elsewhere(lambda: StorageLocation.objects.locked().get(pk=fleet.nvme.pk)):
        job = services.schedule_deletion(
            checkpoint=fleet.checkpoints[200], copy=fleet.copy(200, fleet.nvme), reason="superseded", actor=OPERATOR
        )
        assert DeletionItem.objects.filter(job=job, location=fleet.nvme).count() == 3
        # Another worker's lock on the same location still waits for the first.
        with pytest.raises(OperationalError, match="lock timeout"), transaction.atomic():
            StorageLocation.objects.locked().get(pk=fleet.nvme.pk)


@pytest.mark.django_db(transaction=True)
def test_a_deletion_is_scheduled_while_the_usage_rollup_of_its_location_runs(monkeypatch):
    """The rollup locks the location's usage cursor; the cursor's default ordering joins the location, and a lock
    without ``of`` took the location too: the deadlock of the PostgreSQL pass (tests/ckptfleet/test_row_locks.py)."""
    from django.utils import timezone

    import spend.usage

    if connection.vendor != "postgresql":
        pytest.skip("row locks between connections: this runs in the PostgreSQL pass")
    fleet = build_fleet()
    today = timezone.now().date()
    spend.usage.usage_refresh(location=fleet.nvme, day=today)  # the location has a cursor
    holding, done, failed = threading.Event(), threading.Event(), []
    real = spend.usage.PriceBook

    class Paused(real):  # type: ignore[valid-type,misc]
        @classmethod
        def load(cls, *args, **kwargs):
            if threading.current_thread().name == "rollup":
                holding.set()  # the cursor is locked: the rollup waits here, inside its transaction
                done.wait(timeout=30)
            return real.load(*args, **kwargs)

    monkeypatch.setattr(spend.usage, "PriceBook", Paused)

    def rollup() -> None:
        try:
            spend.usage.usage_refresh(location=fleet.nvme, day=today)
        except Exception as exc:  # reported by the test
            failed.append(exc)
        finally:
            connections.close_all()

    worker = threading.Thread(target=rollup, name="rollup")
    worker.start()
    try:
        assert holding.wait(timeout=10)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")
        job = services.schedule_deletion(
            checkpoint=fleet.checkpoints[200], copy=fleet.copy(200, fleet.nvme), reason="superseded", actor=OPERATOR
        )
        assert DeletionItem.objects.filter(job=job, location=fleet.nvme).count() == 3
    finally:
        done.set()
        worker.join(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
    assert not failed, failed
