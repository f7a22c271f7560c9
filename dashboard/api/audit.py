"""Read-only API of the audit trail: /api/v1/audit/, with the page's filters. Nothing here writes."""

from __future__ import annotations

from rest_framework import serializers, viewsets

from access.scoping import restrict_events
from audit.models import AuditEvent
from ckptfleet.api_fields import AsciiIntegerField, FleetModelSerializer
from dashboard.audit_filters import AuditEventFilter


class AuditEventSerializer(FleetModelSerializer):
    actor = serializers.CharField(source="actor_label", read_only=True)
    actor_user_id = AsciiIntegerField(source="actor_id", read_only=True)

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "at",
            "actor_kind",
            "actor",
            "actor_user_id",
            "source",
            "action",
            "target_type",
            "target_id",
            "target_label",
            "reason",
            "case_ref",
            "before",
            "after",
            "request_id",
            "prev_hash",
            "hash",
            # How ``hash`` was made ("sha256", or "hmac-sha256:<key id>"): enough to re-check it with the key.
            "alg",
        ]
        read_only_fields = fields


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The append-only audit trail, newest first (cursor pagination on the id). Filters as on /audit/."""

    queryset = AuditEvent.objects.all()
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter

    def get_queryset(self):
        return restrict_events(super().get_queryset(), self.request.user)
