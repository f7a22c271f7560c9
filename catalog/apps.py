from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from fleet.restore_assumptions import parse_assumptions


class CatalogConfig(AppConfig):
    name = "catalog"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A bad override stops the start, naming the variable (settings only checked that it is a JSON object).
        try:
            parse_assumptions(settings.RESTORE_ASSUMPTIONS)
        except ValueError as exc:
            raise ImproperlyConfigured(f"CKPTFLEET_RESTORE_ASSUMPTIONS: {exc}") from None
