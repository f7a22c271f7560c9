"""A message that kills its worker is delivered a bounded number of times, then refused; other work goes on.

Real parts: a redis-server of the test's own, PostgreSQL, and a `celery -A ckptfleet worker` process
(prefork pool). The poison task takes its worker process down with ``os._exit(1)``, as a segfault would:
no result, no acknowledgement, and with acks_late plus reject-on-worker-lost the message goes straight
back to the queue. The task counts its own runs, independently of the guard (ckptfleet/deliveries.py).
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from audit.models import AuditEvent
from ckptfleet import deliveries
from ckptfleet.celery import app as celery_app
from ckptfleet.deliveries import GuardedTask
from tests.conftest import wait_for
from tests.helpers.broker import spawn_worker, stop_worker, use_broker
from tests.helpers.broker_tasks import echo, mark, poison
from tests.reliability.conftest import scale

pytestmark = pytest.mark.services

# The smoke run sets a lower bound to stay short (a worker process takes seconds to replace here); the
# long run keeps the default of CKPTFLEET_TASK_MAX_DELIVERIES.
MAX_DELIVERIES = scale(3, 5)


def test_every_task_of_the_app_is_guarded():
    for name, task in celery_app.tasks.items():
        if not name.startswith("celery."):
            assert isinstance(task, GuardedTask), name


def test_in_process_tasks_are_not_counted(monkeypatch):
    # Eager mode: nothing is redelivered, so nothing is counted and no Redis is asked.
    def no_redis(url):
        raise AssertionError(f"an in-process task asked Redis ({url})")

    monkeypatch.setattr(deliveries, "_client", no_redis)
    assert celery_app.conf.task_always_eager
    assert echo.delay(7).get() == 7


def worker_env() -> dict[str, str]:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {"DATABASE_URL": url, "CKPTFLEET_BROKER_VISIBILITY_TIMEOUT": "3600"}
    if MAX_DELIVERIES != 5:
        env["CKPTFLEET_TASK_MAX_DELIVERIES"] = str(MAX_DELIVERIES)
    return env


def test_a_poisoned_message_is_refused_after_its_deliveries_and_a_normal_task_still_runs(
    broker_redis, transactional_db, tmp_path
):
    if connection.vendor != "postgresql":
        pytest.skip("the worker records the refusal in the shared database; this runs in the PostgreSQL pass")
    poisons = scale(1, 3)
    log = tmp_path / "worker.log"
    client = broker_redis.client()
    undo = use_broker(broker_redis.url)
    worker = None
    try:
        worker = spawn_worker(broker_redis.url, log, extra_env=worker_env(), concurrency=1)
        ids = []
        for n in range(poisons):
            task_id = str(uuid.uuid4())
            poison.apply_async((broker_redis.url, f"tests:poison:runs:{n}"), task_id=task_id)
            ids.append(task_id)
            mark.delay(broker_redis.url, "tests:poison:done", f"after-{n}", 0)

        def refused() -> bool:
            assert worker.poll() is None, f"the worker exited: {log.read_text()[-3000:]}"
            return AuditEvent.objects.filter(action="task.refused").count() == poisons

        wait_for(refused, timeout=scale(50, 150), interval=0.5, what="the poisoned messages to be refused")
        wait_for(lambda: client.scard("tests:poison:done") == poisons, timeout=30, what="the normal tasks to complete")
        runs = [int(client.get(f"tests:poison:runs:{n}") or 0) for n in range(poisons)]
        assert runs == [MAX_DELIVERIES] * poisons, runs
        for task_id in ids:
            event = AuditEvent.objects.get(action="task.refused", target_label__contains=task_id)
            assert event.target_label == f"tests.broker.poison[{task_id}]"
            assert event.after == {"task": "tests.broker.poison", "task_id": task_id, "deliveries": MAX_DELIVERIES + 1}
            assert event.actor_kind == "system"
            assert f"Refused task tests.broker.poison[{task_id}]" in log.read_text()
        # Refused means gone: nothing is left in the queue or unacknowledged to come back again.
        wait_for(lambda: client.hlen("unacked") == 0 and client.llen("ckptfleet") == 0, timeout=20, what="empty queue")
        assert worker.poll() is None
        print(
            f"\npoisoned messages: {poisons}; deliveries counted: {sum(runs) + poisons} "
            f"({MAX_DELIVERIES} runs each, then refused); normal tasks completed: {poisons} of {poisons}"
        )
    finally:
        undo()
        if worker is not None:
            stop_worker(worker)
