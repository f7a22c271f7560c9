"""Admin of the audit trail: read-only, as everywhere (no one, superusers included, edits an event)."""

from __future__ import annotations

from django.contrib import admin

from audit.models import AuditChainHead, AuditEvent
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
