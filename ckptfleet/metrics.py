"""``/metrics``: a few gauges in Prometheus' text exposition format (version 0.0.4), without a client library.

Apps register gauges (``register_gauges``) from their ``ready``; each returns (name, help, value) triples, a value of
None leaving the sample out (nothing measured yet). Open like ``/healthz/`` unless CKPTFLEET_METRICS_TOKEN is set;
then a scrape must send ``Authorization: Bearer <token>`` (Prometheus: ``authorization: {credentials_file: ...}``).
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Callable, Iterable

from django.conf import settings
from django.http import HttpResponse
from django.views.decorators.http import require_GET

Gauge = tuple[str, str, float | None]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_COLLECTORS: list[Callable[[], Iterable[Gauge]]] = []


def register_gauges(collect: Callable[[], Iterable[Gauge]]) -> None:
    _COLLECTORS.append(collect)


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


def exposition() -> str:
    lines = []
    for collect in _COLLECTORS:
        for name, help_text, value in collect():
            if value is None:
                continue
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {_number(value)}"]
    return "\n".join(lines) + "\n"


def _authorized(request) -> bool:
    token = settings.METRICS_TOKEN
    if not token:
        return True
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


@require_GET
def metrics(request):
    if not _authorized(request):
        response = HttpResponse("a bearer token is required (CKPTFLEET_METRICS_TOKEN)\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        response["Content-Type"] = "text/plain; charset=utf-8"
        return response
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)
