"""Tasks that exist only for the broker tests; a test's worker loads them with ``-I tests.helpers.broker_tasks``.

They keep their traces in the broker's own Redis (the URL comes with each call), so they need no database.
"""

from __future__ import annotations

import os
import time

import redis

from ckptfleet.celery import app


def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)


@app.task(name="tests.broker.mark", acks_late=True)
def mark(url: str, key: str, member: str, seconds: float = 0.0) -> str:
    """Sleep ``seconds``, then add ``member`` to the set ``key``: the set lists the tasks that completed."""
    time.sleep(seconds)
    deadline = time.monotonic() + 60
    while True:  # the broker may be restarting right now
        try:
            _redis(url).sadd(key, member)
            return member
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@app.task(name="tests.broker.poison", acks_late=True)
def poison(url: str, key: str) -> None:
    """Count this run in ``key``, then take the worker process down as a segfault would: no result, no ack."""
    _redis(url).incr(key)
    os._exit(1)


@app.task(name="tests.broker.echo", acks_late=True)
def echo(value: int) -> int:
    return value
