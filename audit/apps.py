from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit trail: who acted (``Actor``), the append-only hash-chained events, and their verifier.

    The lowest app: every other app records its actions here, and it imports none of them."""

    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"
