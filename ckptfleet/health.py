"""A cheap liveness and readiness answer for load balancers and compose health checks.

Apps above this floor add a section of facts to the answer (``register_section``): the audit app adds its last
verification and anchor. A section reports; it never turns the answer into a 503, which would take a working web
app out of its load balancer for a problem that people must look at, not restart.
"""

from collections.abc import Callable

from django.db import connection
from django.http import JsonResponse

_SECTIONS: dict[str, Callable[[], dict]] = {}


def register_section(name: str, facts: Callable[[], dict]) -> None:
    """Add ``name: facts()`` to the healthy answer (called from an app's ``ready``)."""
    _SECTIONS[name] = facts


def healthz(request):
    """200 when the database answers, 503 otherwise; no login, no templates, no static files."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return JsonResponse({"status": "unavailable", "database": type(exc).__name__}, status=503)
    answer: dict = {"status": "ok"}
    for name, facts in _SECTIONS.items():
        answer[name] = facts()
    return JsonResponse(answer)
