from django.apps import AppConfig


class ActionsConfig(AppConfig):
    name = "actions"
    verbose_name = "Actions: pins, holds, deletions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the Object Lock mirror task in web processes and workers alike.
        from actions import objectlock  # noqa: F401
