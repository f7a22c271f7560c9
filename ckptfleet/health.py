"""A cheap liveness and readiness answer for load balancers and compose health checks."""

from django.db import connection
from django.http import JsonResponse


def healthz(request):
    """200 when the database answers, 503 otherwise; no login, no templates, no static files."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return JsonResponse({"status": "unavailable", "database": type(exc).__name__}, status=503)
    return JsonResponse({"status": "ok"})
