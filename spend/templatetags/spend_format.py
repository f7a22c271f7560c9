"""Formatting for the spend pages: money always with its currency and cents, bytes in binary units."""

from __future__ import annotations

from datetime import date
from decimal import ROUND_HALF_UP, Decimal

from django import template
from django.urls import reverse
from django.utils.html import format_html

from catalog.templatetags.fleet_format import bytes_iec, count, location_href

register = template.Library()

CENT = Decimal("0.01")


def money_text(value) -> str:
    """An amount without its currency: cents, rounded half up once; a non-zero amount that would read "0.00" keeps
    two significant digits instead ("0.0042"), so a small sum never reads as nothing. No "-0.00"."""
    amount = Decimal(value)
    cents = amount.quantize(CENT, rounding=ROUND_HALF_UP)
    if cents == 0 and amount != 0:
        places = min(9, 1 - amount.adjusted())  # two significant digits, to the billionth the usage is priced in
        small = amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
        if small == 0:
            return f"{'>-' if amount < 0 else '<'}0.000000001"
        return f"{small.normalize():f}"
    return f"{abs(cents) if cents == 0 else cents:,.2f}"


@register.filter
def money(value, currency: str = "USD") -> str:
    """ "1,234.56 USD", "-0.40 USD", "0.0042 USD": the currency always, cents unless that would read 0.00."""
    if value is None or value == "":
        return "—"
    return f"{money_text(value)} {currency}"


@register.filter
def signed_money(value, currency: str = "USD") -> str:
    """A change of money with its sign: "+12.30 USD", "-4.00 USD", "0.00 USD"."""
    if value is None or value == "":
        return "—"
    sign = "+" if Decimal(value) > 0 else ""
    return f"{sign}{money(value, currency)}"


@register.filter
def percent(value) -> str:
    if value is None or value == "":
        return "—"
    return f"{Decimal(value):,.1f} %"


def _plain_price(value) -> str:
    text = f"{Decimal(value).normalize():f}"
    if "." not in text or len(text.split(".")[1]) < 2:
        text = f"{Decimal(value):.2f}"
    return text


@register.filter
def price(value, currency: str = "USD") -> str:
    """A price per GiB-month with every significant digit and at least cents: "0.023 USD per GiB-month"."""
    if value is None or value == "":
        return "—"
    return f"{_plain_price(value)} {currency} per GiB-month"


def _link(row: dict, column, basis) -> str | None:
    period = basis.period
    if column.key == "run" and row.get("run_id"):
        return f"{reverse('spend:run', args=[row['run_id']])}?{period.param}"
    if column.key == "team" and row.get("team_id") and basis.scope.team_id is None:
        return f"{reverse('spend:overview')}?{period.param}&team={row['team_id']}"
    if column.key == "location" and row.get("location_id"):
        return location_href(_Location(row["location_id"], row.get("host_id")))
    if column.key == "day" and isinstance(row.get("day"), date):
        scope = f"&{basis.scope.params}" if basis.scope.params else ""
        return f"{reverse('spend:overview')}?day={row['day']:%Y-%m-%d}{scope}"
    if column.key == "checkpoint" and row.get("checkpoint_id"):
        return reverse("catalog:checkpoint-detail", args=[row["checkpoint_id"]])
    return None


class _Location:
    def __init__(self, pk: int, host_id: int | None) -> None:
        self.pk = pk
        self.host_id = host_id


@register.simple_tag
def spend_cell(row: dict | None, column, table, *, link: bool = True):
    """One cell of a spend table, formatted by its column's kind; exact values in the title."""
    if row is None:
        return ""
    value = row.get(column.key)
    currency = table.currency
    if column.kind == "money":
        text = signed_money(value, currency) if column.key.endswith("change") else money(value, currency)
        return text
    if column.kind == "bytes":
        if value is None:
            return "—"
        return format_html('<span title="{}">{}</span>', count(value, "byte"), bytes_iec(value))
    if column.kind == "count":
        return count(value)
    if column.kind == "percent":
        return percent(value)
    if column.kind == "gib_months":
        return "—" if value is None else f"{Decimal(value):,.3f}"
    if column.kind == "price":
        return "—" if value is None else f"{_plain_price(value)} {currency}"
    if column.kind == "date":
        return "—" if value is None else f"{value:%Y-%m-%d}"
    text = "" if value is None else str(value)
    href = _link(row, column, table.basis) if link else None
    if href and text:
        return format_html('<a href="{}">{}</a>', href, text)
    return text or "—"


@register.filter
def is_numeric(column) -> bool:
    return column.numeric
