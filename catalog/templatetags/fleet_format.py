"""Formatting for pages: every number with its unit, every time with its absolute UTC value, every
state in words as well as colour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from catalog.verification import is_verification_stale, stale_days
from ckptfleet.units import bytes_iec

register = template.Library()

register.filter("bytes_iec", bytes_iec)


@register.filter(needs_autoescape=True)
def path_breaks(value, autoescape: bool = True) -> str:
    """A path or key that may wrap after each "/", not in the middle of a name: ``llm/run/iter_0000300/__0_0.distcp``
    wraps between its parts, not as "distc" / "p" (a single name wider than its column still wraps, by CSS)."""
    if value is None:
        return ""
    *heads, last = str(value).split("/")
    # Each part escaped by format_html; only the <wbr> after each slash is markup.
    return format_html_join("", "{}/<wbr>", ((part,) for part in heads)) + format_html("{}", last)


@register.filter
def count(value, noun: str = "") -> str:
    """A count with thousands separators and, given a noun, the noun: ``n|count:"file"`` → "12,345 files".

    The noun may be "singular,plural" for irregular words: ``n|count:"copy,copies"``.
    """
    if value is None or value == "":
        return "—"
    try:
        n = int(value)
    except (TypeError, ValueError):
        return str(value)
    text = f"{n:,}"
    if not noun:
        return text
    singular, _, plural = noun.partition(",")
    return f"{text} {singular if n == 1 else (plural or singular + 's')}"


def _as_utc(value: datetime) -> datetime:
    if timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@register.filter
def utc(value) -> str:
    """An absolute time in UTC, to the second: "2026-11-21 12:00:00 UTC"."""
    if not isinstance(value, datetime):
        return "—"
    return f"{_as_utc(value):%Y-%m-%d %H:%M:%S} UTC"


@register.filter
def when(value) -> str:
    """A time as people read it, in a ``<time>`` whose title holds the exact ISO value: "27 Nov 2026, 17:32 UTC"."""
    if not isinstance(value, datetime):
        return "—"
    exact = _as_utc(value)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        exact.isoformat(),
        exact.isoformat(),
        f"{exact:%-d %b %Y, %H:%M} UTC",
    )


@register.filter
def yes_no(value, words: str = "Yes,No") -> str:
    """A boolean in words: ``True|yes_no`` -> "Yes"; ``x|yes_no:"held,not held"`` for other words; None -> "—"."""
    if value is None or value == "":
        return "—"
    yes, _, no = words.partition(",")
    return yes if value else no


def _ago(delta: timedelta) -> str:
    seconds = int(abs(delta.total_seconds()))
    if seconds < 10:
        return ""
    if seconds < 60:
        amount = f"{seconds} s"
    elif seconds < 3600:
        amount = f"{seconds // 60} min"
    elif seconds < 48 * 3600:
        amount = f"{seconds // 3600} h"
    else:
        amount = f"{seconds // 86400} d"
    return amount


@register.filter
def relative_time(value, never: str = "never"):
    """ "3 min ago" in a ``<time>`` element whose datetime and title carry the absolute UTC time.

    Older than 90 days, the date itself reads better than a number of days.
    """
    if not isinstance(value, datetime):
        return format_html('<span class="muted">{}</span>', never)
    moment = _as_utc(value)
    delta = timezone.now() - moment
    amount = _ago(delta)
    if abs(delta) > timedelta(days=90):
        text = f"{moment:%Y-%m-%d}"
    elif not amount:
        text = "just now"
    elif delta >= timedelta(0):
        text = f"{amount} ago"
    else:
        text = f"in {amount}"
    iso = moment.isoformat().replace("+00:00", "Z")
    return format_html('<time datetime="{}" title="{}">{}</time>', iso, utc(moment), text)


@register.filter
def duration(seconds) -> str:
    """A duration in seconds as "0.4 s", "42 s", "3 min 4 s", "2 h 5 min" or "3 d 4 h"."""
    if seconds is None or seconds == "":
        return "—"
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    try:
        s = float(seconds)
    except (TypeError, ValueError):
        return str(seconds)
    if s < 10:
        return f"{s:.1f} s"
    whole = round(s)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


# Every state a page shows, with a symbol so that colour is never the only signal.
_BADGES = {
    "complete": ("ok", "✓", "Complete"),
    "partial": ("warn", "◐", "Partial"),
    "corrupt": ("bad", "✗", "Corrupt"),
    "verified": ("ok", "✓", "Verified"),
    "unverified": ("neutral", "?", "Unverified"),
    "mismatch": ("bad", "✗", "Checksums disagree"),
    # Copies disagree and nothing independent says which is right (promise 10): not trusted, not condemned.
    "disputed": ("warn", "⚖", "Disputed"),
    "applied": ("ok", "✓", "Applied"),
    "failed": ("bad", "✗", "Failed"),
    "processing": ("info", "…", "Processing"),
    "received": ("info", "…", "Waiting"),
    "active": ("info", "●", "Active"),
    "finished": ("neutral", "■", "Finished"),
    "deleted": ("neutral", "○", "Finished and deleted"),
    "abandoned": ("neutral", "◌", "Abandoned"),
    "temporary": ("warn", "!", "Left-over of an interrupted save"),
    "gone": ("neutral", "○", "Gone"),
    "pointer": ("warn", "↻", "Wrong resume pointer"),
}


@register.filter
def state_badge(value):
    """A badge with a symbol and words for a copy state (complete, partial, corrupt) and the other
    states pages show (verification, inventory status, run status)."""
    key = str(value or "").lower()
    tone, symbol, label = _BADGES.get(key, ("neutral", "•", key.replace("_", " ").capitalize() or "Unknown"))
    return format_html(
        '<span class="badge badge--{}"><span class="badge__icon" aria-hidden="true">{}</span>{}</span>',
        tone,
        symbol,
        label,
    )


@register.filter
def run_status(run):
    """A run's status badge, then who said it and when: "Finished · inferred 3 d ago", "Failed · api 2 h ago"."""
    badge = state_badge(run.status)
    source = getattr(run, "status_source", "")
    if not source:
        return badge
    when = run.status_changed_at
    label = run.get_status_source_display().lower()
    if not isinstance(when, datetime):
        return format_html('{} <span class="muted small">· {}</span>', badge, label)
    return format_html('{} <span class="muted small">· {} {}</span>', badge, label, relative_time(when))


@register.filter
def location_href(location) -> str:
    """The page of a storage location (a bucket, or a host's root with a link to its host)."""
    return reverse("fleet:location-detail", args=[location.pk])


@register.filter
def host_href(host) -> str:
    """The page of a host: a ``Host``, or its id."""
    return reverse("fleet:host-detail", args=[getattr(host, "pk", host)])


@register.filter
def ckpt_label(checkpoint, word: str = "step") -> str:
    """ "step 12,000", or for a checkpoint saved without a step its tag ("final", "last.ckpt").

    ``word`` capitalises the start of a heading: ``checkpoint|ckpt_label:"Step"``.
    """
    step = getattr(checkpoint, "step", None)
    if step is not None:
        return f"{word} {step:,}"
    return getattr(checkpoint, "tag", "") or "untagged"


@register.filter
def once(values) -> list:
    """The items of a list, each once, in their first order."""
    return list(dict.fromkeys(values or []))


@register.filter
def reasons_once(copy) -> list[str]:
    """A copy's reasons and then its verification's, each text once, in order.

    A checksum mismatch that made a copy corrupt is recorded in both lists (``catalog.verification``),
    so a page that printed both would say it twice.
    """
    seen: dict[str, None] = {}
    for reason in [*(getattr(copy, "reasons", None) or []), *(getattr(copy, "verification_reasons", None) or [])]:
        seen.setdefault(str(reason), None)
    return list(seen)


@register.filter
def days_ago(value) -> str:
    """Whole days since ``value``: "today", "1 day ago", "12 days ago"; "—" for no time."""
    if not isinstance(value, datetime):
        return "—"
    days = (timezone.now() - _as_utc(value)).days
    if days <= 0:
        return "today"
    return f"{days:,} day{'s' if days != 1 else ''} ago"


@register.filter
def verification_stale(copy) -> str:
    """ "not verified for 30 days" when a verified copy's checksums are older than ``VERIFY_STALE_DAYS``, else ''."""
    return f"not verified for {stale_days():,} days" if is_verification_stale(copy) else ""
