"""Requests refused before any view runs: a NUL character in the path or a parameter, and a body over the limit.

PostgreSQL cannot hold U+0000 in text, so a NUL that reaches a query was a DataError (a 500); here it is a 400
naming where it was (the path, a query parameter or a form field; JSON bodies: ``ckptfleet.parsers``). A body
whose Content-Length is over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (10 MB; the streamed inventory upload has its own
limit) is refused with 413 before the view reads it.

Any answer (a 413, a 400, a refusal before the view read the body) is sent only after the unread body has
been read and thrown away, up to ``CKPTFLEET_BODY_DRAIN_BYTES``: a client that sends its whole body before
reading (urllib, requests) then gets the answer instead of a broken pipe (gunicorn closes a socket with
unread data). A larger body is not read, and the client may see the connection close while still sending.

``BadParameter`` (``ckptfleet.params``) raised by a page view becomes the 400 page with its message; the
API's exception handler answers it for the API.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render
from django.template import loader
from django.views.defaults import page_not_found

from ckptfleet.params import BadParameter

_CHUNK = 1024 * 1024
_FORMS = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def _shown(name: str) -> str:
    return repr(name.replace("\x00", "")[:40])


def _is_api(request) -> bool:
    return request.path_info.startswith("/api/")


def refusal(request, status: int, code: str, detail: str) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"error": code, "detail": detail}, status=status)
    return HttpResponse(f"{detail}\n", status=status, content_type="text/plain; charset=utf-8")


def nul_problem(request) -> str | None:
    if "\x00" in request.path_info:
        return "the path contains a NUL character"
    for name, values in request.GET.lists():
        if "\x00" in name or any("\x00" in v for v in values):
            return f"query parameter {_shown(name)} contains a NUL character"
    return None


def drain(request, limit: int) -> bool:
    """Read and discard what is left of the body, up to ``limit`` bytes; True when all of it was read."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    if length > limit:
        return False
    read = 0
    while read <= limit:
        try:
            chunk = request.read(_CHUNK)
        except Exception:  # the body was already consumed another way (request.body): nothing left to drain
            return True
        if not chunk:
            return True
        read += len(chunk)
    return False


class RequestGuardMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        problem = nul_problem(request)
        response = refusal(request, 400, "bad_request", problem) if problem else self.get_response(request)
        # Whatever the answer, a body nobody read is read now (a no-op when the view read it). Past the bound
        # nothing is read: the server closes the connection after the answer (gunicorn's sync workers always
        # do; a WSGI application may not send Connection itself).
        drain(request, settings.CKPTFLEET_BODY_DRAIN_BYTES)
        return response

    def process_view(self, request, view_func, view_args, view_kwargs):
        raw = request.META.get("CONTENT_LENGTH") or "0"
        if not raw.isascii() or not raw.isdigit():
            return refusal(request, 400, "bad_request", "Content-Length must be a whole number of bytes")
        view = getattr(view_func, "view_class", None) or getattr(view_func, "cls", None)
        if getattr(view, "streams_request_body", False):
            return None  # it reads the body in chunks and enforces its own limit
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if int(raw) > limit:
            return refusal(
                request,
                413,
                "too_large",
                f"the request body is {int(raw)} bytes, over the limit of {limit} bytes",
            )
        if request.method == "POST" and request.content_type in _FORMS:
            try:
                form = request.POST
            except (MultiPartParserError, SuspiciousOperation):  # too many fields, a broken multipart body
                return refusal(request, 400, "bad_request", "the form body cannot be read")
            for name, values in form.lists():
                if "\x00" in name or any("\x00" in v for v in values):
                    return refusal(request, 400, "bad_request", f"form field {_shown(name)} contains a NUL character")
        return None

    def process_exception(self, request, exception):
        if isinstance(exception, BadParameter) and not _is_api(request):
            return render(request, "400.html", {"detail": exception.message}, status=400)
        return None


def not_found(request, exception):
    """handler404: the API's JSON shape under /api/, the 404 page elsewhere."""
    if _is_api(request):
        return refusal(request, 404, "not_found", f"nothing is at {request.path_info}")
    return page_not_found(request, exception)


class ErrorPagesInDebugMiddleware:
    """With DEBUG on, show the product's own 404 and 500 pages instead of Django's technical ones
    (``CKPTFLEET_ERROR_PAGES=1``: the demo, which runs with DEBUG for its conveniences but is shown to people).

    Without DEBUG, Django already renders templates/404.html, 403.html and 500.html; a 403 is the product's page
    either way. Only pages are replaced: the API (/api/) keeps its JSON errors, and a view that answers 404 itself
    keeps its answer. Django has logged the exception before its page is replaced.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not self._page(request):
            return response
        # No view matched the address: Django's technical "Page not found", listing every URL pattern.
        if response.status_code == 404 and getattr(request, "resolver_match", None) is None:
            return self._render(request, "404.html", 404)
        # A view raised: Django logged it and drew its technical page with the traceback.
        if response.status_code == 500 and response.get("Content-Type", "").startswith("text/html"):
            return self._render(request, "500.html", 500, plain=True)
        return response

    def process_exception(self, request, exception):
        if isinstance(exception, Http404) and self._page(request):
            return self._render(request, "404.html", 404)
        return None

    @staticmethod
    def _page(request) -> bool:
        return not _is_api(request)

    @staticmethod
    def _render(request, template: str, status: int, *, plain: bool = False):
        if plain:  # as Django's own handler500: no request context, nothing that may fail again
            return HttpResponse(loader.get_template(template).render(), status=status)
        return render(request, template, status=status)


class ContentSecurityPolicyMiddleware:
    """Send ``settings.CONTENT_SECURITY_POLICY`` with every response that has none of its own.

    The policy allows scripts from this site's own static files only (``script-src 'self'``, no ``'unsafe-inline'``):
    an injected ``<script>`` or ``onclick=`` does not run even if some escaping were ever missed. The templates have
    no inline script or event handler (tests/reliability/test_issue26_small.py keeps it so; tests/browser/test_csp.py
    listens for violations in Chromium). Django 5.2 has no CSP setting of its own (6.0 does): this is the one place."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.policy = settings.CONTENT_SECURITY_POLICY

    def __call__(self, request):
        response = self.get_response(request)
        if self.policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self.policy
        return response
