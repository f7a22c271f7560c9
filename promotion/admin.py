"""Promotions in the admin: read-only. Requests and cancellations go through the services (pages, API)."""

from django.contrib import admin

from promotion.models import PromotionItem, PromotionJob


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(PromotionJob)
class PromotionJobAdmin(ReadOnly):
    list_display = [
        "id",
        "checkpoint",
        "target_location",
        "target_storage_class",
        "method",
        "state",
        "bytes_done",
        "bytes_total",
        "requested_label",
        "requested_at",
    ]
    list_filter = ["state", "method"]
    list_select_related = ["checkpoint__run__team", "target_location"]
    raw_id_fields = ["checkpoint", "source_copy", "target_location"]


@admin.register(PromotionItem)
class PromotionItemAdmin(ReadOnly):
    list_display = ["id", "job", "path", "size", "state"]
    list_filter = ["state"]
    raw_id_fields = ["job", "shard_file"]
