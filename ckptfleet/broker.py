"""The Redis broker transport the workers use: kombu's, with two repairs for a Redis that restarts.

Set as ``broker_transport`` in the settings whenever ``REDIS_URL`` is given; without it Celery would
pick kombu's own class for the ``redis://`` scheme, and a Redis restart could end the worker for good.

What goes wrong in kombu 5.7's Redis transport (celery 5.7, redis-py 8.1), seen with a real worker:

1. When the broker connection drops, the worker's consumer first *collects* the broken connection
   (``Connection.collect``), which detaches the transport from its connection (``transport.client``
   becomes None), and then closes the connection again. That second close reaches the channel that
   was reading when the socket died; closing it requeues its unacknowledged messages, which builds a
   new Redis connection pool from ``transport.client.hostname`` -- and raises ``AttributeError:
   'NoneType' object has no attribute 'hostname'``. AttributeError is not one of the connection
   errors the consumer retries, so the worker logs "Unrecoverable error" and exits. It happens
   whenever a message was delivered but not yet acknowledged at that moment: a busy worker.
   The same missing ``client`` makes every late acknowledgement of a task that was running across
   the restart fail; Celery swallows that failure, and the finished task's message waits in the
   unacked set for the whole visibility timeout, then runs again.

   Repair: a channel remembers the connection it was opened for, and a channel whose transport was
   detached builds its pool from that. The late acknowledgement then reaches the restarted Redis,
   and requeueing at close fails with an ordinary connection error, which the consumer retries.

2. Requeueing the unacknowledged messages at close cannot work while Redis is down (that is why the
   connection dropped), so they waited for the visibility timeout as well. Repair: the delivery tags
   that could not be requeued are kept in this process, and the next channel that connects requeues
   them at once (each only if it is still unacknowledged in Redis, inside a WATCH transaction, so a
   message is never requeued twice). With ``worker_cancel_long_running_tasks_on_connection_loss`` the
   tasks that were running are stopped when the connection drops, so nothing requeued here is still
   running elsewhere in the worker.
"""

from __future__ import annotations

import logging
import threading

from kombu.transport import redis as kombu_redis

logger = logging.getLogger(__name__)

_stranded: set[str] = set()  # delivery tags whose requeue failed because Redis was unreachable
_stranded_lock = threading.Lock()


def stranded_count() -> int:
    """How many messages this process still has to requeue once Redis answers again."""
    with _stranded_lock:
        return len(_stranded)


class QoS(kombu_redis.QoS):
    """Keeps the messages that could not be requeued while Redis was down, for the next channel."""

    def restore_unacked(self, client=None):
        try:
            return super().restore_unacked(client)
        except self.channel.connection_errors as exc:
            tags = list(self._delivered)
            with _stranded_lock:
                _stranded.update(tags)
            self._delivered.clear()
            logger.warning(
                "Redis is unreachable (%s); %d unacknowledged message(s) will be requeued as soon as it answers",
                exc,
                len(tags),
            )
            return []


class Channel(kombu_redis.Channel):
    QoS = QoS

    def __init__(self, connection, *args, **kwargs):
        # The kombu Connection this channel was opened for; it keeps its settings after kombu
        # detaches it from the transport (see the module's docstring).
        self._conninfo = connection.client
        super().__init__(connection, *args, **kwargs)
        self._requeue_stranded()

    def _connparams(self, asynchronous=False):
        if self.connection.client is None:
            # Detached: this channel's connection settings still say where Redis is.
            self.connection.client = self._conninfo
        return super()._connparams(asynchronous=asynchronous)

    def _requeue_stranded(self) -> None:
        with _stranded_lock:
            tags = list(_stranded)
        if not tags:
            return
        for tag in tags:
            self.qos.restore_by_tag(tag)
            with _stranded_lock:
                _stranded.discard(tag)
        logger.warning("Redis answers again: requeued %d message(s) left unacknowledged when it went away", len(tags))


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with the channel above."""

    Channel = Channel
