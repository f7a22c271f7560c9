"""Admin of the fleet: read-only, like the catalog's.

Hosts, locations and tokens are registered and rotated by ``manage.py fleet_host`` through services
that write audit events; inventories are written by the ingest. The admin shows and searches.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db import models

from audit.actor import Actor
from audit.choices import ActorKind, EventSource
from catalog.templatetags.fleet_format import bytes_iec
from ckptfleet.admin_base import EstimatedCountPaginator, ReadOnlyAdmin
from ckptfleet.errors import DomainError
from fleet.models import Bucket, Host, HostToken, Inventory, MultipartUpload, PricePoint, StorageLocation
from fleet.pricebook import price_set, price_validate


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
    """Buckets are registered by ``manage.py fleet_bucket add`` (``fleet.scan.bucket_add``), which audits it.

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


class PricePointForm(forms.ModelForm):
    """A new price point, checked by the price book's own rules (``fleet.pricebook.price_validate``)."""

    price = forms.DecimalField(
        min_value=0,
        max_digits=20,
        decimal_places=10,
        help_text="In the basis: per GiB-month, per TiB-month, or the monthly cost of the host's drives.",
    )

    class Meta:
        model = PricePoint
        fields = [
            "kind",
            "tier",
            "storage_class",
            "location",
            "host",
            "basis",
            "price",
            "host_capacity_bytes",
            "currency",
            "effective_from",
            "source",
        ]

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            self.change = price_validate(**_price_arguments(data))
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from None
        return data


def _price_arguments(data: dict) -> dict:
    return {
        "tier": data["tier"],
        "price": data["price"],
        "effective_from": data["effective_from"],
        "basis": data["basis"],
        "kind": data.get("kind") or "",
        "storage_class": data.get("storage_class") or "",
        "location": data.get("location"),
        "host": data.get("host"),
        "host_capacity_bytes": data.get("host_capacity_bytes"),
        "currency": data.get("currency") or "",
        "source": data.get("source") or "",
    }


@admin.register(PricePoint)
class PricePointAdmin(ReadOnlyAdmin):
    """Prices are added, never changed or deleted: a change is a new point from its day on.

    Adding goes through ``fleet.pricebook.price_set``, which prices recorded days again and writes
    the audit event, as the price book page does.
    """

    form = PricePointForm
    list_display = ["tier", "storage_class", "scope", "price_per_gib_month", "currency", "effective_from", "created_by"]
    list_filter = ["tier", "kind", "currency"]
    list_select_related = ["location", "host"]
    search_fields = ["source", "storage_class", "location__name", "host__name"]
    raw_id_fields = ["location", "host"]

    def has_add_permission(self, request):
        return request.user.has_perm("fleet.add_pricepoint")

    @admin.display(description="applies to")
    def scope(self, obj: PricePoint) -> str:
        return obj.scope_label

    def save_model(self, request, obj, form, change):
        user = request.user
        actor = Actor(kind=ActorKind.USER, label=user.get_username(), source=EventSource.ADMIN, user=user)
        try:
            point = price_set(actor=actor, **_price_arguments(form.cleaned_data))
        except DomainError as exc:  # the book changed since the form was checked
            raise PermissionDenied(exc.message) from None
        for f in PricePoint._meta.concrete_fields:
            setattr(obj, f.attname, getattr(point, f.attname))
        obj._state.adding = False

    def log_addition(self, request, obj, message):
        return None  # the audit trail has it, with before and after; the admin log would be a second story
