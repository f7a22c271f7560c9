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

3. A message is popped from its queue (BRPOP) before the worker writes its unacked record; if Redis
   goes away in between, the message is in neither place and is lost. Repair: such a message is kept
   in this process too and pushed back to the front of its queue by the next channel that connects.
   (A reply Redis never sent cannot be repaired here: a Redis killed right after serving a BRPOP can
   still lose that one message.)
"""

from __future__ import annotations

import logging
import threading

from kombu.transport import redis as kombu_redis

logger = logging.getLogger(__name__)

_stranded: set[str] = set()  # delivery tags whose requeue failed because Redis was unreachable
# Messages popped from their queue whose unacked record could not be written: (payload, exchange, key).
_unrecorded: list[tuple[dict, str, str]] = []
_stranded_lock = threading.Lock()


def stranded_count() -> int:
    """How many messages this process still has to requeue once Redis answers again."""
    with _stranded_lock:
        return len(_stranded) + len(_unrecorded)


class QoS(kombu_redis.QoS):
    """Keeps the messages that could not be requeued while Redis was down, for the next channel."""

    def append(self, message, delivery_tag):
        # A message is popped from its queue (BRPOP) before its unacked record is written; when Redis goes
        # between the two, the message would be in neither place, lost. Keep it here to requeue instead.
        try:
            return super().append(message, delivery_tag)
        except self.channel.connection_errors:
            delivery = message.delivery_info
            with _stranded_lock:
                _unrecorded.append((message._raw, delivery["exchange"], delivery["routing_key"]))
            logger.warning("Redis went away while a message was being taken; it will be requeued as soon as it answers")
            raise

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
            unrecorded = list(_unrecorded)
        if not tags and not unrecorded:
            return
        for tag in tags:
            self.qos.restore_by_tag(tag)
            with _stranded_lock:
                _stranded.discard(tag)
        if unrecorded:
            with self.conn_or_acquire() as client, client.pipeline() as pipe:
                for payload, exchange, routing_key in unrecorded:
                    self._do_restore_message(payload, exchange, routing_key, pipe)
                pipe.execute()
            with _stranded_lock:
                del _unrecorded[: len(unrecorded)]
        logger.warning(
            "Redis answers again: requeued %d message(s) left unacknowledged when it went away",
            len(tags) + len(unrecorded),
        )


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with the channel above."""

    Channel = Channel
