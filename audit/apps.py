from django.apps import AppConfig


class AuditConfig(AppConfig):
    """The audit trail: who acted (``Actor``), the append-only keyed hash chain of events, its anchors outside the
    database, and their verifier.

    The lowest app: every other app records its actions here, and it imports none of them."""

    name = "audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A task message refused after too many deliveries (ckptfleet.deliveries, a floor below) is audited.
        from audit.services import audit_refused_delivery
        from ckptfleet.deliveries import on_refused

        on_refused(audit_refused_delivery)

        from audit.verify import health_facts, metric_gauges
        from ckptfleet.health import register_section
        from ckptfleet.metrics import register_gauges

        register_section("audit", health_facts)
        register_gauges(metric_gauges)
