"""The reliability scorecard: the product's promises under failure, against the real parts.

Each test has a short smoke variant that runs in every `make test`, and a long one that runs only with
RELIABILITY_LONG=1 (`make test-reliability`). Each prints its figure (restarts survived, deliveries, ...).
"""

from __future__ import annotations

import os

import pytest

LONG = os.environ.get("RELIABILITY_LONG") == "1"


def scale(smoke: int, long: int) -> int:
    """The size of a run: ``smoke`` in every `make test`, ``long`` under RELIABILITY_LONG=1."""
    return long if LONG else smoke


@pytest.fixture
def broker_redis(tmp_path):
    """A redis-server of this test's own on a free port, which the test may kill and restart."""
    from tests.helpers.broker import RedisServer

    server = RedisServer(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()
