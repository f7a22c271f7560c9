"""The deletion grace period: never zero in production settings, a clear refusal at start if it is."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Production needs its secret key and its audit key (at least 32 characters each).
PRODUCTION = {"CKPTFLEET_DEBUG": "0", "DJANGO_SECRET_KEY": "x" * 50, "CKPTFLEET_AUDIT_KEY": "k" * 40}


def start(extra: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}}
    environ.update({"CKPTFLEET_VAR_DIR": str(tmp_path), **extra})
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("extra", "ok"),
    [
        ({**PRODUCTION, "CKPTFLEET_DELETION_GRACE_DAYS": "0"}, False),
        ({**PRODUCTION, "CKPTFLEET_DELETION_GRACE_DAYS": "1"}, True),
        ({"CKPTFLEET_DEBUG": "1", "CKPTFLEET_DELETION_GRACE_DAYS": "0"}, True),
        ({"CKPTFLEET_DEBUG": "1", "CKPTFLEET_DELETION_GRACE_DAYS": "-1"}, False),
    ],
)
def test_a_zero_grace_period_only_starts_in_development(extra, ok, tmp_path):
    done = start(extra, tmp_path)
    if ok:
        assert done.returncode == 0, done.stderr[-2000:]
    else:
        assert done.returncode != 0 and "CKPTFLEET_DELETION_GRACE_DAYS" in done.stderr
