"""One domain error type, one JSON shape for the API, one readable message for the UI."""

from __future__ import annotations

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler


class DomainError(Exception):
    """A refusal the user can understand and act on. ``code`` is stable, ``message`` is for people."""

    code = "invalid"
    http_status = status.HTTP_400_BAD_REQUEST

    def __init__(self, message: str, *, code: str | None = None, http_status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if http_status:
            self.http_status = http_status


class PermissionRefused(DomainError):
    code = "forbidden"
    http_status = status.HTTP_403_FORBIDDEN


class NotAuthenticated(DomainError):
    code = "not_authenticated"
    http_status = status.HTTP_401_UNAUTHORIZED


class TooLarge(DomainError):
    code = "too_large"
    http_status = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE


def api_exception_handler(exc, context):
    """Every API error answers ``{"error": code, "detail": message}``; never a traceback."""
    if isinstance(exc, DomainError):
        return Response({"error": exc.code, "detail": exc.message}, status=exc.http_status)
    response = exception_handler(exc, context)
    if response is not None:
        detail = response.data.get("detail") if isinstance(response.data, dict) else None
        code = getattr(detail, "code", None) or getattr(exc, "default_code", "error")
        if detail is not None and len(response.data) == 1:
            response.data = {"error": code, "detail": str(detail)}
        else:
            response.data = {"error": code, "detail": "invalid input", "fields": response.data}
    return response
