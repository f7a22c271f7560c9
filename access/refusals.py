"""Refusals of actions go into the audit trail, each in its own transaction.

A refusal usually happens inside the transaction of the action it refuses, which then rolls back
with the refusal's exception; an event written there would vanish with it. So a refusal is *noted*
while a request (or a command wrapped in ``refusals_collected``) runs, and written after the view has
returned, outside its transaction. Outside any of those and outside a transaction it is written at once.
Refused reads (GET, HEAD, OPTIONS) are not audited: only a refused attempt to change something is.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from django.db import connection, transaction

from audit.choices import ActorKind
from audit.services import audit_record

log = logging.getLogger(__name__)

ACTION = "access.refused"


@dataclass
class Refusal:
    """One refused attempt: who, what they tried and which role it needed."""

    user: object | None
    doing: str
    role: str = ""
    why: str = ""
    source: str = ""
    target_type: str = ""
    target_id: int | None = None
    target_label: str = ""
    extra: dict = field(default_factory=dict)

    def key(self) -> tuple:
        return (getattr(self.user, "pk", None), self.doing, self.role, self.target_type, self.target_id)


_pending: ContextVar[list[Refusal] | None] = ContextVar("ckptfleet_refusals", default=None)


def note_refusal(refusal: Refusal) -> None:
    """Record ``refusal`` now if nothing is in flight, else after the request or command finishes."""
    pending = _pending.get()
    if pending is not None:
        if all(r.key() != refusal.key() for r in pending):
            pending.append(refusal)
        return
    if connection.in_atomic_block:
        # No request or command collects it and the caller's transaction will roll back with the
        # refusal: check roles before opening the transaction (as the services do), or wrap the
        # caller in ``refusals_collected``.
        log.warning("refusal of %r inside a transaction with no collector: not audited", refusal.doing)
        return
    write_refusals([refusal], source=refusal.source or "command")


def write_refusals(refusals: list[Refusal], *, source: str, path: str = "", method: str = "", request_id: str = ""):
    """Append one ``access.refused`` event per refusal, each in its own transaction."""
    for refusal in refusals:
        user = refusal.user
        real_user = user if getattr(user, "_meta", None) is not None and getattr(user, "pk", None) else None
        label = user.get_username() if real_user is not None else str(user or "anonymous")
        after = {"role": refusal.role, "doing": refusal.doing, "why": refusal.why, **refusal.extra}
        if path:
            after["path"] = path
        if method:
            after["method"] = method
        try:
            with transaction.atomic():
                audit_record(
                    actor_kind=ActorKind.USER if real_user is not None else ActorKind.SYSTEM,
                    actor=real_user,
                    actor_label=label[:200],
                    source=refusal.source or source,
                    action=ACTION,
                    target_type=refusal.target_type or ("page" if source == "ui" else "endpoint" if path else ""),
                    target_id=refusal.target_id,
                    target_label=refusal.target_label or path,
                    reason=refusal.why or f"{refusal.doing} refused",
                    after=after,
                    request_id=request_id,
                )
        except Exception:  # the refusal itself already answered the person; never turn it into a 500
            log.exception("could not audit the refusal of %r", refusal.doing)


@contextlib.contextmanager
def refusals_collected(*, source: str, path: str = "", method: str = "", request_id: str = "") -> Iterator[list]:
    """Collect refusals noted inside the block and audit them when it ends (also when it raises)."""
    pending: list[Refusal] = []
    token = _pending.set(pending)
    try:
        yield pending
    finally:
        _pending.reset(token)
        if pending:
            write_refusals(pending, source=source, path=path, method=method, request_id=request_id)
