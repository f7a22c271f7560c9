"""`make demo` stops everything it started: Ctrl-C (SIGINT to its process group) and a SIGTERM to scripts/demo
alone both leave no web server and no S3 endpoint listening, and no periodic work or demo agent running.

Each case runs the real script on free ports with its own var folder: migrate, moto, seed_demo, runserver. That
takes most of a minute, so the module is marked ``slow``; it still runs in ``make test``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import port_open

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
START_SECONDS = 300  # migrate, seed the demo fleet (hosts, buckets, 75 days of spend), start the server
STOP_SECONDS = 60  # on a loaded CI machine, several Python processes take a while to exit


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status < 500
    except OSError:
        return False


@pytest.mark.parametrize("how", ["ctrl-c to the group", "sigterm to the script"])
def test_stopping_the_demo_stops_the_web_server_and_the_s3_endpoint(tmp_path, how):
    web, s3 = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "CKPTFLEET_ARTEFACTS")}
    env.update(
        PORT=str(web),
        S3_PORT=str(s3),
        CKPTFLEET_VAR_DIR=str(tmp_path / "var"),
        CKPTFLEET_DEMO_PYTHON=sys.executable,  # the test venv: it has the demo's packages too
    )
    log = (tmp_path / "demo.log").open("wb")
    # A session of its own: its process group is the demo's alone, as a terminal's foreground job is. And SIGINT
    # at its default, as a terminal's job has it: when the suite runs as a background job of a shell (make test runs
    # the two databases side by side), it inherits an ignored SIGINT, which bash could not trap. (A disposition set
    # here is inherited through exec; no preexec_fn, which is unsafe beside the live server's threads.)
    before = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        demo = subprocess.Popen(
            ["bash", "scripts/demo"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    finally:
        signal.signal(signal.SIGINT, before)
    try:
        deadline = time.monotonic() + START_SECONDS
        while not up(f"http://127.0.0.1:{web}/healthz/"):
            assert demo.poll() is None, "the demo stopped before serving:\n" + (tmp_path / "demo.log").read_text()
            assert time.monotonic() < deadline, (
                "the demo did not serve in time:\n" + (tmp_path / "demo.log").read_text()
            )
            time.sleep(1)
        assert port_open("127.0.0.1", s3), "the S3 endpoint is not listening while the demo runs"
        # The periodic work and the demo hosts' agents run beside the server.
        agents_log = tmp_path / "var" / "demo-agents.log"
        while "reporting to" not in (agents_log.read_text() if agents_log.exists() else ""):
            assert time.monotonic() < deadline, "the demo agents did not start:\n" + (tmp_path / "demo.log").read_text()
            time.sleep(1)
        assert "periodic tasks" in (tmp_path / "var" / "fleet-beat.log").read_text()

        if how == "ctrl-c to the group":
            os.killpg(demo.pid, signal.SIGINT)
        else:
            demo.send_signal(signal.SIGTERM)
        demo.wait(timeout=STOP_SECONDS)

        deadline = time.monotonic() + STOP_SECONDS
        while port_open("127.0.0.1", web) or port_open("127.0.0.1", s3):
            assert time.monotonic() < deadline, (
                f"after {how}: web server listening: {port_open('127.0.0.1', web)}, "
                f"S3 endpoint listening: {port_open('127.0.0.1', s3)}"
            )
            time.sleep(0.5)
        assert demo.returncode in (130, 143), demo.returncode
        # Nothing of its process group is left: the periodic work and the agents stopped too.
        while True:
            try:
                os.killpg(demo.pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, f"after {how}: processes of the demo are still running"
            time.sleep(0.5)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        try:  # whatever is left of its process group
            os.killpg(demo.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
