"""Admin of pins, holds and deletions: read-only. Every change goes through ``actions.services``, which
checks the promises and writes the audit event; an admin form that saved fields would skip both, so
there is none (no add, change or delete, for superusers too). A compliance hold is guarded once more
by the database (``actions.holdguard``), should a future admin ever try.
"""

from __future__ import annotations

from django.contrib import admin

from actions.models import DeletionItem, DeletionJob, Hold, Pin
from ckptfleet.admin_base import ReadOnlyAdmin


@admin.register(Pin)
class PinAdmin(ReadOnlyAdmin):
    list_display = ["id", "checkpoint", "reason", "pinned_label", "pinned_at", "unpinned_label", "unpinned_at"]
    list_filter = ["unpinned_at"]
    search_fields = ["reason", "pinned_label"]
    raw_id_fields = ["checkpoint"]
    list_select_related = ["checkpoint__run__team"]


@admin.register(Hold)
class HoldAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "case_ref",
        "mode",
        "retain_until",
        "run",
        "checkpoint",
        "placed_label",
        "placed_at",
        "released_label",
        "mirror_state",
    ]
    list_filter = ["mode", "released_at", "mirror_state"]
    search_fields = ["case_ref", "reason", "placed_label"]
    raw_id_fields = ["run", "checkpoint"]
    list_select_related = ["run__team", "checkpoint__run__team"]


@admin.register(DeletionJob)
class DeletionJobAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "scope",
        "checkpoint",
        "copy",
        "orphan_location",
        "state",
        "origin",
        "requested_label",
        "execute_after",
        "items_total",
    ]
    list_filter = ["state", "scope", "needs_approval"]
    search_fields = ["reason", "requested_label", "origin", "orphan_prefix"]
    raw_id_fields = ["checkpoint", "copy", "orphan_location", "orphan_run"]
    list_select_related = ["checkpoint__run__team", "copy__location", "orphan_location"]


@admin.register(DeletionItem)
class DeletionItemAdmin(ReadOnlyAdmin):
    list_display = ["id", "job", "location", "path", "version_id", "size", "state"]
    list_filter = ["state"]
    search_fields = ["=job__id", "path"]
    raw_id_fields = ["job", "copy", "location", "shard_file"]
    list_select_related = ["job", "location"]
