"""How long an agent's pull URLs stay valid: CKPTFLEET_PROMOTION_PRESIGN_SECONDS, checked at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from promotion import pulls

ROOT = Path(__file__).resolve().parents[2]
READ = "from django.conf import settings; print(settings.PROMOTION_PRESIGN_SECONDS)"


def start(value: str | None, tmp_path) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    environ.pop("CKPTFLEET_PROMOTION_PRESIGN_SECONDS", None)
    environ.update({"CKPTFLEET_VAR_DIR": str(tmp_path), "CKPTFLEET_DEBUG": "1"})
    if value is not None:
        environ["CKPTFLEET_PROMOTION_PRESIGN_SECONDS"] = value
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", READ],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(("value", "seconds"), [(None, 3600), ("", 3600), ("60", 60), ("604800", 604800)])
def test_it_comes_from_the_environment(value, seconds, tmp_path):
    done = start(value, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == str(seconds)


@pytest.mark.parametrize("value", ["59", "0", "-5", "604801", "an hour", "3600.5"])
def test_a_bad_value_stops_the_start_with_a_message_naming_it(value, tmp_path):
    done = start(value, tmp_path)
    assert done.returncode != 0
    assert "manage.py: not configured: CKPTFLEET_PROMOTION_PRESIGN_SECONDS=" in done.stderr, done.stderr[-2000:]


def test_the_pull_urls_are_signed_for_that_long(settings):
    settings.PROMOTION_PRESIGN_SECONDS = 900
    assert pulls.presign_seconds() == 900
