"""The reliability scorecard, kill -9 (issue 15, item 7): a 10,000-object deletion whose Celery workers are
killed with SIGKILL again and again, while the Redis broker restarts.

The body is tests/actions/test_execution_worker.py's (real worker processes, moto's S3 server, PostgreSQL):
after every kill a new worker starts, and after every other kill the broker (a redis-server of this test's
own, with its append-only file) is restarted too. Nothing outside the frozen list is deleted, the held
checkpoint's objects stay, the job completes with one completion event. Prints kills, restarts and time.
"""

from __future__ import annotations

import pytest
from django.db import connection

from ckptfleet.celery import app as celery_app
from tests.actions.test_execution_worker import big_deletion_under_kills, spawn_worker
from tests.helpers.broker import use_broker
from tests.reliability.conftest import scale

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def restart(broker_redis) -> None:
    """Restart the broker; this process's pooled connections to it are dropped (its workers reconnect themselves)."""
    broker_redis.restart(down_for=1.0)
    celery_app._pool = None
    if "amqp" in celery_app.__dict__:
        celery_app.amqp._producer_pool = None


def test_kill_minus_nine_during_a_big_deletion_with_broker_restarts(s3, broker_redis, tmp_path):
    if connection.vendor != "postgresql":
        pytest.skip("separate worker processes need a shared database; this runs in the PostgreSQL pass")
    undo = use_broker(broker_redis.url)
    try:
        first = spawn_worker(celery_app.conf.task_default_queue, tmp_path / "worker-0.log")
        try:
            figures = big_deletion_under_kills(
                s3,
                first,
                tmp_path,
                rounds=scale(2, 12),
                restart_broker=lambda: restart(broker_redis),
            )
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(timeout=30)
    finally:
        undo()
    print(f"\n[scorecard] kill -9 during a 10,000-object deletion: {figures}")
