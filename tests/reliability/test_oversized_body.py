"""A body over the 10 MB limit is answered 413 with a JSON error, and a client that sends its whole body before
reading (urllib, requests) reads that answer: the server drains the body first (ckptfleet.middleware).

Before, gunicorn's sync worker answered and closed the socket with megabytes unread; the kernel reset the
connection and urllib saw "Broken pipe" instead of any answer. Tried here against the production server
(gunicorn, started as a process) and against the test live server, with 11 MB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import port_open, wait_for
from tests.reliability.conftest import free_port, report

ELEVEN_MB = 11 * 1024 * 1024
ROOT = Path(__file__).resolve().parents[2]


def post(url: str, size: int, *, path: str = "/api/v1/actions/pins/") -> tuple[int, dict]:
    request = urllib.request.Request(
        url + path, data=b" " * size, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as answer:
        return answer.code, json.loads(answer.read())


@pytest.fixture
def gunicorn(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(CKPTFLEET_DEBUG="1", CKPTFLEET_VAR_DIR=str(tmp_path / "var"), PYTHONPATH=str(ROOT))
    log = (tmp_path / "gunicorn.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "ckptfleet.wsgi:application", f"--bind=127.0.0.1:{port}", "--workers=1"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: port_open("127.0.0.1", port), timeout=60, what="gunicorn")
        time.sleep(0.5)  # the worker boots after the port opens
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_gunicorn_answers_an_11_mb_body_with_a_413_that_urllib_reads(gunicorn):
    answers = [post(gunicorn, ELEVEN_MB) for _ in range(3)]
    for code, body in answers:
        assert code == 413
        assert body == {
            "error": "too_large",
            "detail": f"the request body is {ELEVEN_MB} bytes, over the limit of {10 * 1024 * 1024} bytes",
        }
    # A refusal that does not read the body (a NUL in the query string) is drained the same way.
    code, body = post(gunicorn, 2 * 1024 * 1024, path="/api/v1/actions/pins/?x=%00")
    assert (code, body["error"]) == (400, "bad_request")
    report("oversized bodies answered 413 over gunicorn (11 MB each)", len(answers))


def test_the_live_server_answers_an_11_mb_body_with_a_413(live_server):
    code, body = post(live_server.url, ELEVEN_MB)
    assert (code, body["error"]) == (413, "too_large")
