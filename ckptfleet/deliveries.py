"""A bound on how often one task message is delivered: the base class of every task of the app.

Tasks acknowledge late and reject their message when the worker is lost, so a message whose task
kills its worker (a crash in a C extension, ``os._exit``, the kernel's OOM killer, SIGKILL) goes back
to the queue and kills the next worker too, for ever. ``GuardedTask`` counts the deliveries of each
task id in Redis (the broker) and forgets the count whenever a run ends in Python, whatever the
outcome (success, error, retry): only runs that took their process down add up. The delivery after
``TASK_MAX_DELIVERIES`` of those is refused: acknowledged without running, logged at ERROR, and
handed to the recorders registered with ``on_refused`` (the audit app writes an audit event).

A run stopped because the broker connection was lost (settings: cancel long-running tasks on
connection loss) also counts until the task next completes; only a task cut off by that many broker
losses in a row, without ever finishing in between, would be refused for it.

In-process (eager) tasks, and a broker other than Redis, are not counted: nothing is redelivered there.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from urllib.parse import urlsplit

import redis
from celery import Task
from celery.exceptions import Reject
from django.conf import settings

logger = logging.getLogger(__name__)

KEY_PREFIX = "ckptfleet:deliveries:"
# Long enough to span TASK_MAX_DELIVERIES redeliveries, each up to a visibility timeout apart.
KEY_TTL_SECONDS = 7 * 24 * 3600

Recorder = Callable[..., None]
_recorders: list[Recorder] = []
_clients: dict[tuple[int, str], redis.Redis] = {}


def on_refused(recorder: Recorder) -> Recorder:
    """Register ``recorder(task_name=, task_id=, deliveries=)``, called for every refused message.

    An app above this floor records refusals its own way (the audit app: an audit event) without
    this module importing it."""
    if recorder not in _recorders:
        _recorders.append(recorder)
    return recorder


def _client(url: str) -> redis.Redis:
    # One client per process: prefork children must not share their parent's sockets.
    key = (os.getpid(), url)
    if key not in _clients:
        _clients[key] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return _clients[key]


def deliveries_key(task_id: str) -> str:
    return f"{KEY_PREFIX}{task_id}"


def delivery_count(url: str, task_id: str) -> int:
    """How many deliveries of ``task_id`` ended without their run finishing (0: none recorded)."""
    value = _client(url).get(deliveries_key(task_id))
    return int(value) if value is not None else 0


class GuardedTask(Task):
    """Every task of the app: refuses a message once it has been delivered too often (see the module)."""

    def _broker_url(self) -> str | None:
        """The Redis broker this delivery came through, or None when deliveries are not counted."""
        request = self.request
        if request.is_eager or not request.delivery_info or not request.id:
            return None
        url = str(self.app.conf.broker_url or "")
        return url if urlsplit(url).scheme in {"redis", "rediss"} else None

    def __call__(self, *args, **kwargs):
        url = self._broker_url()
        if url is None:
            return super().__call__(*args, **kwargs)
        key = deliveries_key(self.request.id)
        try:
            pipe = _client(url).pipeline()
            deliveries = int(pipe.incr(key).expire(key, KEY_TTL_SECONDS).execute()[0])
        except redis.RedisError as exc:
            # The broker just delivered this message, so this is rare; running it is the safer mistake.
            logger.warning("Could not count the deliveries of %s[%s]: %s", self.name, self.request.id, exc)
            return super().__call__(*args, **kwargs)
        limit = settings.TASK_MAX_DELIVERIES
        if deliveries > limit:
            self._refuse(deliveries=deliveries, limit=limit)
            try:
                _client(url).delete(key)
            except redis.RedisError:
                pass  # it expires on its own
            raise Reject(f"delivered {deliveries} times; the last {limit} runs took their worker down", requeue=False)
        try:
            return super().__call__(*args, **kwargs)
        finally:
            # The run ended in Python (returned, raised, or asked for a retry): not a poisoned delivery.
            try:
                _client(url).delete(key)
            except redis.RedisError:
                pass

    def _refuse(self, *, deliveries: int, limit: int) -> None:
        logger.error(
            "Refused task %s[%s]: its message was delivered %d times and the last %d runs ended with their "
            "worker dying (crash, os._exit, SIGKILL, out of memory); acknowledged without running it "
            "(CKPTFLEET_TASK_MAX_DELIVERIES=%d)",
            self.name,
            self.request.id,
            deliveries,
            deliveries - 1,
            limit,
        )
        for recorder in list(_recorders):
            try:
                recorder(task_name=self.name, task_id=self.request.id, deliveries=deliveries)
            except Exception:
                logger.exception("Could not record the refusal of %s[%s]", self.name, self.request.id)
