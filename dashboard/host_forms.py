"""The "Mark down" / "Mark up" form a host carries on the pages that show it (its host page, the recovery page)."""

from __future__ import annotations

from django.contrib import messages

from audit.actor import Actor
from ckptfleet.errors import DomainError
from fleet.models import Host
from fleet.services import host_mark_down, host_mark_up


def mark_host_from_form(request, host: Host) -> None:
    """A page's "Mark down" / "Mark up" form (``do``, ``reason``): the audited services, and a message either way."""
    up = request.POST.get("do") == "up"
    service = host_mark_up if up else host_mark_down
    try:
        service(host=host, reason=request.POST.get("reason", ""), actor=Actor.for_request(request))
    except DomainError as exc:
        messages.error(request, f"Nothing was changed: {exc.message}")
    else:
        if up:
            messages.success(request, f"{host.name} is marked up: its copies are ranked for restore again.")
        else:
            messages.success(request, f"{host.name} is marked down: its copies are no longer offered for restore.")
