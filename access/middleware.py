"""Role enforcement for pages, and the collection of refusals for the audit trail.

Every signed-in person needs at least one role to see any page: without one they get a 403 page that
says whom to ask. The API answers the same refusal as JSON through ``access.permissions`` (the DRF
default), so ``/api/`` is left to it. Login, logout, the health check and static files are exempt.
"""

from __future__ import annotations

import re
import uuid

from django.conf import settings
from django.template.response import TemplateResponse

from access.refusals import Refusal, refusals_collected
from access.roles import Role, roles_of
from audit.choices import EventSource

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


def exempt(path: str) -> bool:
    static = settings.STATIC_URL or "/static/"
    return path.startswith(("/accounts/login/", "/accounts/logout/", "/healthz/", "/metrics", static, "/api/"))


def whom_to_ask() -> tuple[str, list[str]]:
    """The configured contact (CKPTFLEET_ACCESS_CONTACT) and the usernames of up to five admins."""
    from django.contrib.auth import get_user_model
    from django.db.models import Q

    admins = (
        get_user_model()
        .objects.filter(Q(is_superuser=True) | Q(groups__name=Role.ADMIN), is_active=True)
        .distinct()
        .order_by("username")
        .values_list("username", flat=True)[:5]
    )
    return settings.CKPTFLEET_ACCESS_CONTACT, list(admins)


def request_id_of(request) -> str:
    """The caller's X-Request-ID when it is sane, else a new one; it goes into audit events."""
    given = request.headers.get("X-Request-ID", "")
    return given if _REQUEST_ID.match(given) else uuid.uuid4().hex


class RoleMiddleware:
    """Refuses pages to people without a role; audits refused actions after the view, in their own transaction."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.request_id = request_id_of(request)
        source = EventSource.API if request.path.startswith("/api/") else EventSource.UI
        if request.path.startswith("/admin/"):
            source = EventSource.ADMIN
        with refusals_collected(
            source=source, path=request.path[:500], method=request.method, request_id=request.request_id
        ) as pending:
            user = getattr(request, "user", None)
            if user is not None and user.is_authenticated and not exempt(request.path) and not roles_of(user):
                if request.method not in SAFE_METHODS:
                    pending.append(
                        Refusal(
                            user=user,
                            doing=f"{request.method} {request.path[:200]}",
                            role="viewer",
                            why=f"{user.get_username()} holds no role",
                        )
                    )
                response = self.no_role(request)
            else:
                response = self.get_response(request)
        response["X-Request-ID"] = request.request_id
        return response

    def no_role(self, request):
        contact, admins = whom_to_ask()
        response = TemplateResponse(request, "access/no_role.html", {"contact": contact, "admins": admins}, status=403)
        return response.render()
