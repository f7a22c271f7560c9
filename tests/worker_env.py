"""Loaded first (``-p tests.worker_env`` in pyproject.toml), before Django reads its settings: a pytest-xdist worker
(``PYTEST_XDIST_WORKER``: gw0, gw1, ...) gets a var folder of its own below the run's ``CKPTFLEET_VAR_DIR``, so
that no two workers write the same development keys, media files or SQLite file. pytest-django already gives each
worker its own test database (``test_<name>_gw0``...); ports are free ones, queues and buckets named per test."""

from __future__ import annotations

import os

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker:
    _base = os.environ.get("CKPTFLEET_VAR_DIR") or os.path.join(os.path.dirname(os.path.dirname(__file__)), "var")
    os.environ["CKPTFLEET_VAR_DIR"] = os.path.join(_base, f"xdist-{_worker}")
