from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "retention"
    verbose_name = "Retention: keep rules, the simulator and policies"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from actions.keepers import on_keepers_asked
        from retention.changes import register_kinds
        from retention.keeping import keepers_of

        register_kinds()
        on_keepers_asked(keepers_of)
