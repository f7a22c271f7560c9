"""The periodic work (``ckptfleet.celery``'s beat schedule): run now by an admin, or on its schedule in-process.

With a broker, ``celery beat`` sends the schedule's tasks to the workers. The embedded default (the demo) has no
broker and no beat: ``manage.py fleet_beat`` then keeps the same schedule in one process, running each task in it
(tasks run in-process there), so a deletion whose grace period ended starts by itself.

An admin can also run every periodic task now (the Jobs page, ``manage.py fleet_beat --once``): one audited
``periodic.run_now`` event names the tasks, then each is sent (with a broker) or run (in-process).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from access.roles import Role, has_role
from audit.actor import Actor
from audit.services import audit
from ckptfleet.celery import app, task
from ckptfleet.errors import DomainError

log = logging.getLogger(__name__)

RUN_NOW = "periodic.run_now"


@dataclass(frozen=True)
class Entry:
    name: str  # the schedule's key, "start-due-deletions"
    task: str  # "actions.tasks.start_due_deletions"
    every: float  # seconds


@dataclass
class Outcome:
    entry: Entry
    state: str  # "done", "failed" (in-process) or "queued" (sent to the workers)
    detail: str = ""


def entries() -> list[Entry]:
    """The beat schedule, in its own order."""
    return [Entry(name, spec["task"], float(spec["schedule"])) for name, spec in app.conf.beat_schedule.items()]


def in_process() -> bool:
    return bool(settings.CELERY_TASK_ALWAYS_EAGER)


def run_entry(entry: Entry) -> Outcome:
    """Run or send one entry's task. A failure is logged and reported, never raised: the others still run."""
    local = in_process()
    try:
        # In-process (no broker): run it here, now, whatever the Celery app's own configuration says.
        result = task(entry.task).apply() if local else task(entry.task).apply_async()
    except Exception as exc:  # a broker that is down: the task is not sent
        log.exception("periodic task %s could not be started", entry.task)
        return Outcome(entry, "failed", f"{type(exc).__name__}: {exc}")
    if not local:
        return Outcome(entry, "queued")
    if result.failed():
        log.error("periodic task %s failed: %r", entry.task, result.result)
        return Outcome(entry, "failed", f"{type(result.result).__name__}: {result.result}")
    return Outcome(entry, "done")


def run_now(*, actor: Actor, request_id: str = "") -> list[Outcome]:
    """Every periodic task, now: an admin's action, audited before anything runs."""
    if actor.user is not None and not has_role(actor.user, Role.ADMIN):
        raise DomainError("running the periodic work now needs the admin role", code="forbidden")
    chosen = entries()
    with transaction.atomic():
        audit(
            actor,
            RUN_NOW,
            target_type="periodic",
            target_label="every periodic task",
            after={"tasks": [e.name for e in chosen], "mode": "in-process" if in_process() else "queued"},
            request_id=request_id,
        )
    return [run_entry(e) for e in chosen]


def loop(
    *,
    tick: float = 1.0,
    stop: Callable[[], bool] = lambda: False,
    on_outcome: Callable[[Outcome], None] = lambda o: None,
) -> None:
    """Keep the schedule in this process until ``stop()``: each entry runs once its interval has passed since it
    last ran (the first time one interval after the start, as celery beat does)."""
    started = time.monotonic()
    last = {e.name: started for e in entries()}
    while not stop():
        now = time.monotonic()
        for entry in entries():
            if stop():
                return
            if now - last[entry.name] >= entry.every:
                last[entry.name] = now
                on_outcome(run_entry(entry))
        time.sleep(tick)


def stop_on_signals() -> threading.Event:
    """Make Ctrl-C and SIGTERM stop a long-running command at once, even mid-step: each raises KeyboardInterrupt
    and sets the returned event, which the command's loop also checks (a step's own error handling may swallow the
    interruption). For ``fleet_beat`` and ``demo_agents``, whose every step survives being stopped."""
    stopping = threading.Event()

    def interrupt(*_) -> None:
        stopping.set()
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, interrupt)
    return stopping
