"""Row locks held by another transaction while a test acts: for the PostgreSQL tests of what waits for what."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.db import connection, connections, transaction


@contextmanager
def held_elsewhere(lock: Callable[[], object], *, lock_timeout: str = "2s") -> Iterator[None]:
    """Run ``lock()`` in a transaction of another connection (a thread) and keep that transaction open while the
    body runs; in the body, a statement that waits for a lock fails after ``lock_timeout`` instead of hanging."""
    holding, done = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                lock()
                holding.set()
                done.wait(timeout=30)
        finally:
            connections.close_all()

    other = threading.Thread(target=hold)
    other.start()
    try:
        assert holding.wait(timeout=10), "the other transaction did not take its locks"
        with connection.cursor() as cursor:
            cursor.execute(f"SET lock_timeout = '{lock_timeout}'")
        yield
    finally:
        done.set()
        other.join(timeout=30)
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = 0")
