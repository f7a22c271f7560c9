"""Admin of spend: the rollups are read-only (written by the ingest and beat); a price point is added through the
price book's own rules (``spend.prices``), audited, and prices the recorded days again."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied

from audit.actor import Actor
from audit.choices import EventSource
from ckptfleet.admin_base import EstimatedCountPaginator, ReadOnlyAdmin
from ckptfleet.errors import DomainError
from ckptfleet.units import bytes_iec
from fleet.models import PricePoint
from spend.models import UsageCursor, UsageDaily
from spend.prices import price_set, price_validate
from spend.usage import money


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
        actor = Actor.person(user, EventSource.ADMIN)
        try:
            point = price_set(actor=actor, **_price_arguments(form.cleaned_data))
        except DomainError as exc:  # the book changed since the form was checked
            raise PermissionDenied(exc.message) from None
        for f in PricePoint._meta.concrete_fields:
            setattr(obj, f.attname, getattr(point, f.attname))
        obj._state.adding = False

    def log_addition(self, request, obj, message):
        return None  # the audit trail has it, with before and after; the admin log would be a second story


@admin.register(UsageDaily)
class UsageDailyAdmin(ReadOnlyAdmin):
    """The daily rollup is written by the ingest and beat only (``spend.usage``): read-only here."""

    list_display = ["day", "location", "run", "tier", "storage_class", "state", "size", "files", "cost", "carried"]
    list_filter = ["state", "tier", "carried"]
    list_select_related = ["location", "run__team"]
    search_fields = ["run__name", "location__name", "team__name"]
    raw_id_fields = ["location", "team", "run"]
    date_hierarchy = "day"
    show_full_result_count = False
    paginator = EstimatedCountPaginator

    @admin.display(description="size", ordering="bytes")
    def size(self, obj: UsageDaily) -> str:
        return bytes_iec(obj.bytes)

    @admin.display(description="cost that day", ordering="cost_nanos")
    def cost(self, obj: UsageDaily) -> str:

        return "no price" if obj.cost_nanos is None else f"{money(obj.cost_nanos):.6f}"


@admin.register(UsageCursor)
class UsageCursorAdmin(ReadOnlyAdmin):
    list_display = ["location", "day", "refreshed_day", "refreshed_at"]
    list_select_related = ["location"]
    search_fields = ["location__name"]
    raw_id_fields = ["location"]
