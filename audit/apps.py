from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit trail: who acted (``Actor``), the append-only hash-chained events, and their verifier.

    The lowest app: every other app records its actions here, and it imports none of them."""

    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A task message refused after too many deliveries (ckptfleet.deliveries, a floor below) is audited.
        from audit.services import audit_refused_delivery
        from ckptfleet.deliveries import on_refused

        on_refused(audit_refused_delivery)
