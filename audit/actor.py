"""Who is acting, as the audit trail names them: a person (through the UI, the API, the admin or a command), a
host's agent, a worker, or the system itself. Build one with the constructors, never field by field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from audit.choices import ActorKind, EventSource


@dataclass(frozen=True)
class Actor:
    """Who is acting, for the audit trail."""

    kind: str
    label: str
    source: str
    user: Any = None

    @classmethod
    def person(cls, user: Any, source: str) -> Actor:
        """A signed-in person acting through ``source`` (an ``EventSource``)."""
        return cls(kind=ActorKind.USER, label=user.get_username(), source=source, user=user)

    @classmethod
    def for_request(cls, request: Any, source: str | None = None) -> Actor:
        """The person behind ``request``: through the API when its path is under /api/, else the web UI."""
        if source is None:
            source = EventSource.API if request.path.startswith("/api/") else EventSource.UI
        return cls.person(request.user, source)

    @classmethod
    def system(cls, label: str, source: str = EventSource.TASK) -> Actor:
        """The product acting on its own: a policy, a schedule, a check."""
        return cls(kind=ActorKind.SYSTEM, label=label, source=source)

    @classmethod
    def worker(cls, label: str) -> Actor:
        """A background worker carrying out a job someone asked for."""
        return cls(kind=ActorKind.WORKER, label=label, source=EventSource.TASK)

    @classmethod
    def agent(cls, host_name: str) -> Actor:
        """A host's agent, authenticated by its host token."""
        return cls(kind=ActorKind.HOST, label=host_name, source=EventSource.AGENT)

    @classmethod
    def command(cls, label: str = "manage.py") -> Actor:
        return cls(kind=ActorKind.SYSTEM, label=label, source=EventSource.COMMAND)
