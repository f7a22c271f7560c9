"""Bearer-token authentication for host agents."""

from __future__ import annotations

from rest_framework import authentication

from ckptfleet.errors import NotAuthenticated
from fleet.models import Host
from fleet.services import host_authenticate


class HostPrincipal:
    """The request.user of an agent request: a host, never a person."""

    is_authenticated = True
    is_host = True  # what access.permissions looks for
    is_staff = False
    is_superuser = False

    def __init__(self, host: Host) -> None:
        self.host = host

    def __str__(self) -> str:
        return f"host:{self.host.name}"


class HostTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme != self.keyword or not raw.strip().startswith("cfh_"):
            return None
        host = host_authenticate(raw.strip())
        return HostPrincipal(host), host

    def authenticate_header(self, request) -> str:
        return self.keyword


__all__ = ["HostPrincipal", "HostTokenAuthentication", "NotAuthenticated"]
