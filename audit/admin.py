"""Admin of the audit trail: read-only, as everywhere (no one, superusers included, edits an event)."""

from __future__ import annotations

from django.contrib import admin

from audit.models import AuditAnchor, AuditChainHead, AuditEvent, AuditVerification
from ckptfleet.admin_base import EstimatedCountPaginator, ReadOnlyAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    """Audit events are append-only: no one, superusers included, adds, changes or deletes one here."""

    list_display = ["at", "actor_label", "actor_kind", "source", "action", "target_type", "target_label"]
    list_filter = ["actor_kind", "source"]
    search_fields = ["^action", "target_label", "actor_label", "case_ref", "=request_id"]
    raw_id_fields = ["actor"]
    show_full_result_count = False
    paginator = EstimatedCountPaginator

    def get_actions(self, request):
        return {}


@admin.register(AuditChainHead)
class AuditChainHeadAdmin(ReadOnlyAdmin):
    list_display = ["last_hash", "count"]


@admin.register(AuditAnchor)
class AuditAnchorAdmin(ReadOnlyAdmin):
    """Each anchor of the chain written (or tried) outside the database; the anchor itself lives there."""

    list_display = ["at", "target", "count", "last_hash", "outcome", "location"]
    list_filter = ["target", "outcome"]


@admin.register(AuditVerification)
class AuditVerificationAdmin(ReadOnlyAdmin):
    list_display = ["finished_at", "trigger", "ok", "events_checked", "anchors_checked", "problem"]
    list_filter = ["ok", "trigger"]
