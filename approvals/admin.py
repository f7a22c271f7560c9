"""Change requests in the admin: read-only, since every step must be audited (use the Approvals page or API)."""

from django.contrib import admin

from approvals.models import ChangeRequest
from ckptfleet.admin_base import ReadOnlyAdmin


@admin.register(ChangeRequest)
class ChangeRequestAdmin(ReadOnlyAdmin):
    list_display = ("pk", "kind", "target_label", "state", "requested_label", "requested_at", "decided_label")
    list_filter = ("state", "kind")
    search_fields = ("target_label", "requested_label", "decided_label", "reason")
