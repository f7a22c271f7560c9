"""Admin of the fleet: read-only, like the catalog's.

Hosts, locations and tokens are registered and rotated by ``manage.py fleet_host`` through services
that write audit events; inventories are written by the ingest. The admin shows and searches.
"""

from __future__ import annotations

from django.contrib import admin
from django.db import models

from ckptfleet.admin_base import EstimatedCountPaginator, ReadOnlyAdmin
from ckptfleet.units import bytes_iec
from fleet.models import Bucket, Host, HostToken, Inventory, MultipartUpload, StorageLocation


@admin.register(Host)
class HostAdmin(ReadOnlyAdmin):
    list_display = ["name", "site", "region", "last_seen_at", "created_at"]
    list_filter = ["site", "region"]
    search_fields = ["name", "site", "region"]


@admin.register(HostToken)
class HostTokenAdmin(ReadOnlyAdmin):
    """Tokens are issued by ``manage.py fleet_host``, never here. Only the public prefix is ever shown."""

    fields = ["host", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_display = ["host", "prefix_shown", "state", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["host"]
    search_fields = ["host__name", "=prefix"]
    raw_id_fields = ["host"]

    def get_queryset(self, request):
        return super().get_queryset(request).defer("token_hash")

    def lookup_allowed(self, lookup, value, request=None):
        # A filter on the hash in the URL would be an oracle for it, a character at a time.
        if lookup.split("__", 1)[0] == "token_hash":
            return False
        return super().lookup_allowed(lookup, value, request)

    @admin.display(description="prefix", ordering="prefix")
    def prefix_shown(self, obj: HostToken) -> str:
        return f"{obj.prefix}…"

    @admin.display(description="state")
    def state(self, obj: HostToken) -> str:
        return "revoked" if obj.revoked_at else "active"


@admin.register(StorageLocation)
class StorageLocationAdmin(ReadOnlyAdmin):
    list_display = ["name", "kind", "tier", "host", "root_path", "last_status", "last_applied_at"]
    list_filter = ["kind", "tier"]
    list_select_related = ["host", "last_inventory"]
    search_fields = ["name", "root_path", "host__name"]
    raw_id_fields = ["host", "default_team", "last_inventory"]

    @admin.display(description="last inventory")
    def last_status(self, obj: StorageLocation) -> str:
        inv = obj.last_inventory
        return f"#{inv.pk} {inv.status}" if inv else "none"


@admin.register(Inventory)
class InventoryAdmin(ReadOnlyAdmin):
    list_display = [
        "pk",
        "location",
        "host",
        "status",
        "source",
        "received_at",
        "files_count",
        "size",
        "error_line",
    ]
    list_filter = ["status", "source"]
    list_select_related = ["location", "host"]
    search_fields = ["location__name", "host__name", "=agent"]
    raw_id_fields = ["location", "host"]
    exclude = ["upload"]
    readonly_fields = ["upload_name"]
    show_full_result_count = False
    paginator = EstimatedCountPaginator

    @admin.display(description="size", ordering="bytes_total")
    def size(self, obj: Inventory) -> str:
        return bytes_iec(obj.bytes_total)

    @admin.display(description="stored upload")
    def upload_name(self, obj: Inventory) -> str:
        return obj.upload.name or "—"


@admin.register(Bucket)
class BucketAdmin(ReadOnlyAdmin):
    """Buckets are registered by ``manage.py fleet_bucket add`` (``ingest.scan.bucket_add``), which audits it.

    ``credentials`` is a reference (default, profile:NAME, file:NAME), never a key, so it may be shown.
    """

    list_display = [
        "location",
        "uri",
        "endpoint_url",
        "region_name",
        "credentials",
        "scan_every_minutes",
        "fetch_checksums",
        "versioning",
        "object_lock",
    ]
    list_filter = ["fetch_checksums", "object_lock", "versioning", "addressing_style"]
    list_select_related = ["location"]
    search_fields = ["location__name", "bucket_name", "prefix", "endpoint_url"]
    raw_id_fields = ["location"]
    # Shown, never submitted; says which scheme Django 6 will assume, to keep its deprecation warning away.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    @admin.display(description="bucket and prefix", ordering="bucket_name")
    def uri(self, obj: Bucket) -> str:
        return str(obj)


@admin.register(MultipartUpload)
class MultipartUploadAdmin(ReadOnlyAdmin):
    """Incomplete multipart uploads as the last scans found them; ``gone_at`` once completed or aborted."""

    list_display = ["key", "location", "initiated_at", "storage_class", "parts", "size", "first_seen_at", "gone_at"]
    list_filter = [("gone_at", admin.EmptyFieldListFilter), "storage_class"]
    list_select_related = ["location"]
    search_fields = ["key", "=upload_id", "location__name"]
    raw_id_fields = ["location"]

    @admin.display(description="size of parts", ordering="bytes")
    def size(self, obj: MultipartUpload) -> str:
        return "unknown" if obj.bytes is None else bytes_iec(obj.bytes)
