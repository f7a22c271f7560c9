from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
    verbose_name = "Approvals: changes that wait for a second person"
    default_auto_field = "django.db.models.BigAutoField"
