"""The reliability suite: the product tried as an attacker and as a failing network would (issue 15, item 7).

Every test here uses the real parts (a live server, PostgreSQL when ``DATABASE_URL`` names it, Redis, a Celery
worker process, moto's S3 server) and prints its figure: iterations survived, objects checked, requests fuzzed.

Two lengths of each:

- the smoke: short enough for every ``make test`` (and CI); runs by default;
- the long variant: marked ``@pytest.mark.reliability_long``, skipped unless ``RELIABILITY_LONG=1``, or sized
  by ``scale(smoke, long)``; ``make test-reliability`` runs this folder with ``RELIABILITY_LONG=1`` on SQLite
  and on PostgreSQL + Redis.

Adding a test: put it in this folder, give it a smoke size that finishes in seconds, mark a longer one
``reliability_long`` (or size it by ``scale``), and print one line with ``report(what, figure)`` so that the
run's output (``-s``) is the scorecard. Servers a test starts bind to 127.0.0.1 only and stop themselves;
``free_port`` picks a port the OS offers; ``broker_redis`` is a redis-server of the test's own.
"""

from __future__ import annotations

import os
import socket

import pytest

LONG = os.environ.get("RELIABILITY_LONG", "") == "1"


def scale(smoke: int, long: int) -> int:
    """The size of a run: ``smoke`` in every `make test`, ``long`` under RELIABILITY_LONG=1."""
    return long if LONG else smoke


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "reliability_long: the long variant of a reliability check; runs only with RELIABILITY_LONG=1"
    )


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="long reliability run: make test-reliability (RELIABILITY_LONG=1)")
    for item in items:
        if "reliability_long" in item.keywords and not LONG:
            item.add_marker(skip)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(what: str, figure: object) -> None:
    """One line of the scorecard, shown with pytest -s and in the captured output of a failure."""
    print(f"\n[reliability] {what}: {figure}")


@pytest.fixture
def broker_redis(tmp_path):
    """A redis-server of this test's own on a free port, which the test may kill and restart."""
    from tests.helpers.broker import RedisServer

    server = RedisServer(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()
