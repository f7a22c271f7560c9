from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from fleet.api import schema  # noqa: F401 - registers the host token scheme with drf-spectacular
