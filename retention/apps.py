from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "retention"
    verbose_name = "Retention: keep rules, the simulator and policies"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from retention.changes import register_kinds

        register_kinds()
