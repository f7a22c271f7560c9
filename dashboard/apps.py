from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """The top floor: the pages and API views that put every app's facts side by side (runs and checkpoints with
    their spend, protection and jobs; the overview; recovery; the audit trail; the fleet page), the URL map, and
    the demo. Nothing below imports it."""

    name = "dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from dashboard import problems_reclaim  # noqa: F401 (it adds its source to dashboard.problems.MORE_SOURCES)
