from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "access"
    verbose_name = "Access: roles and API tokens"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from access import schema  # noqa: F401 - registers the token scheme with drf-spectacular
