"""A Redis server of a test's own (it can be killed and restarted) and `celery worker` processes on it.

The machine's Redis is shared, so the tests that restart a broker start their own ``redis-server`` on a
free port, with an append-only file synced on every write, as a production broker keeps its data: a
restart keeps the queues and the unacknowledged messages.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

from tests.conftest import need_service, wait_for

REPO = Path(__file__).resolve().parents[2]
TASKS_MODULE = "tests.helpers.broker_tasks"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    """``redis-server`` on 127.0.0.1:``port`` with its data in ``folder``; ``restart()`` keeps the data."""

    def __init__(self, folder: Path) -> None:
        binary = shutil.which("redis-server")
        need_service("redis-server", binary is not None, "install the redis-server package (scripts/services-up)")
        self.binary = str(binary)
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.restarts = 0
        self.proc: subprocess.Popen | None = None
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=2)

    def answers(self) -> bool:
        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder)]
        command += ["--appendonly", "yes", "--appendfsync", "always", "--save", "", "--protected-mode", "no"]
        with open(self.folder / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(self._up, timeout=20, what=f"redis-server on port {self.port}")
        except AssertionError as exc:
            need_service("redis-server", False, f"it did not start: {exc}")

    def _up(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            return False
        return self.answers()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self, *, down_for: float = 1.0, sig: int = signal.SIGTERM) -> None:
        self.stop(sig)
        time.sleep(down_for)
        self.start()
        self.restarts += 1


def spawn_worker(broker_url: str, log_path: Path, *, extra_env: dict[str, str] | None = None, concurrency: int = 2):
    """``celery -A ckptfleet worker`` as docs/admin/production.md starts it (the prefork pool), on ``broker_url``.

    The test-only tasks of ``tests.helpers.broker_tasks`` are loaded too. Returns once the worker answers
    a ping, which goes through this process's app: call ``use_broker(broker_url)`` first. Without
    DATABASE_URL in ``extra_env`` the worker has a database of its own that the tasks here never touch.
    """
    env = {
        **{k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
        "REDIS_URL": broker_url,
        "CKPTFLEET_DEBUG": "1",
        "CELERY_TASK_ALWAYS_EAGER": "0",
        **(extra_env or {}),
    }
    name = f"reliability-{os.getpid()}-{time.monotonic_ns()}@{socket.gethostname()}"
    command = [sys.executable, "-m", "celery", "-A", "ckptfleet", "worker", "-I", TASKS_MODULE]
    command += ["-c", str(concurrency), "-n", name, "-l", "info"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    from ckptfleet.celery import app

    assert app.conf.broker_url == broker_url, "use_broker(broker_url) first: the ping goes through the app"

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the worker exited: {log_path.read_text()[-3000:]}")
        return bool(app.control.ping(destination=[name], timeout=0.5))

    try:
        wait_for(answers, timeout=90, what="the Celery worker to answer a ping")
    except BaseException:
        stop_worker(proc)
        raise
    return proc


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def use_broker(url: str):
    """Point this process's Celery app at ``url`` (tasks go through it, not in-process); returns an undo."""
    from ckptfleet.celery import app

    def forget_connections() -> None:
        # The cached connection and producer pools still point at the previous broker (as after a fork).
        app._pool = None
        if "amqp" in app.__dict__:
            app.amqp._producer_pool = None

    previous = (app.conf.broker_url, app.conf.task_always_eager)
    app.conf.broker_url = url
    app.conf.task_always_eager = False
    forget_connections()

    def undo() -> None:
        app.conf.broker_url, app.conf.task_always_eager = previous
        forget_connections()

    return undo
