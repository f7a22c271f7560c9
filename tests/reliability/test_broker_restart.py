"""A Celery worker survives its Redis broker restarting, and the work in flight completes promptly.

Real parts: a redis-server of the test's own (append-only file, as a production broker keeps its
data) and a `celery -A ckptfleet worker` process with the prefork pool, as the README starts it. Tasks
flow while Redis is restarted; before the fix the worker died with "Unrecoverable error: AttributeError
'NoneType' object has no attribute 'hostname'" (ckptfleet/broker.py explains why), and the messages it
held waited an hour for their visibility timeout. The worker runs with that hour as its visibility
timeout, so every task that completes here was requeued at reconnection, not by the timeout.
"""

from __future__ import annotations

import time

import pytest

from tests.conftest import wait_for
from tests.helpers.broker import spawn_worker, stop_worker, use_broker
from tests.helpers.broker_tasks import mark
from tests.reliability.conftest import scale

pytestmark = pytest.mark.services


def test_the_worker_survives_redis_restarts_and_finishes_every_task(broker_redis, tmp_path):
    restarts = scale(2, 10)
    per_round = scale(60, 200)
    log = tmp_path / "worker.log"
    done_key = "tests:broker:done"
    sent: set[str] = set()
    undo = use_broker(broker_redis.url)
    worker = None
    try:
        worker = spawn_worker(broker_redis.url, log, extra_env={"CKPTFLEET_BROKER_VISIBILITY_TIMEOUT": "3600"})

        def send(count: int, *, seconds: float) -> None:
            for _ in range(count):
                member = f"t{len(sent)}"
                mark.delay(broker_redis.url, done_key, member, seconds)
                sent.add(member)

        started = time.monotonic()
        for _ in range(restarts):
            # Short tasks keep a message in flight at every moment; slow ones are running when Redis goes.
            send(per_round, seconds=0.02)
            send(2, seconds=2.0)
            wait_for(lambda: broker_redis.client().scard(done_key) > 0, timeout=60, what="a first task to complete")
            broker_redis.restart(down_for=1.0)
            assert worker.poll() is None, f"the worker exited after a Redis restart: {log.read_text()[-3000:]}"
        send(per_round, seconds=0.0)  # work sent after the last restart runs too

        def all_done() -> bool:
            assert worker.poll() is None, f"the worker exited: {log.read_text()[-3000:]}"
            return broker_redis.client().scard(done_key) == len(sent)

        wait_for(all_done, timeout=scale(45, 240), interval=0.5, what="every task to complete after the restarts")
        elapsed = time.monotonic() - started
        client = broker_redis.client()
        wait_for(lambda: client.hlen("unacked") == 0, timeout=20, what="no message left unacknowledged")
        text = log.read_text()
        assert "Unrecoverable error" not in text
        assert worker.poll() is None
        print(
            f"\nbroker restarts survived: {broker_redis.restarts}; tasks completed: {len(sent)} of {len(sent)} "
            f"in {elapsed:.0f} s; worker still running; 0 messages left unacknowledged"
        )
    finally:
        undo()
        if worker is not None:
            stop_worker(worker)
