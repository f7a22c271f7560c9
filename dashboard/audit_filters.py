"""One filter of the audit trail for the page, its CSV export and the API (NetBox's one-FilterSet habit)."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import django_filters
from django import forms
from django.db.models import Q, QuerySet

from audit.choices import ActorKind, EventSource
from audit.models import AuditEvent
from catalog.fields import RunField
from catalog.models import Checkpoint

_NUMBER = forms.TextInput(attrs={"inputmode": "numeric", "pattern": "[0-9]*", "size": 8})
_DAY = forms.DateInput(attrs={"placeholder": "YYYY-MM-DD", "size": 11})


def _day_start(day) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)


class RunFilter(django_filters.CharFilter):
    """A run by "team/run" or id (``catalog.fields.RunField``)."""

    field_class = RunField


class AuditEventFilter(django_filters.FilterSet):
    """Who, what, about what, from where, when, and words in the reason or case reference."""

    actor = django_filters.CharFilter(
        field_name="actor_label",
        lookup_expr="icontains",
        label="Who",
        help_text="Part of a person's, host's or worker's name.",
    )
    actor_kind = django_filters.ChoiceFilter(choices=ActorKind.choices, label="Kind of actor", empty_label="Any kind")
    action = django_filters.CharFilter(
        field_name="action",
        lookup_expr="startswith",
        label="Action",
        help_text="An action or its start: hold, hold.place.",
    )
    target_type = django_filters.CharFilter(
        field_name="target_type", label="Target type", help_text="run, checkpoint, host…"
    )
    target_id = django_filters.NumberFilter(field_name="target_id", label="Target id", widget=_NUMBER)
    run = RunFilter(
        method="filter_run",
        label="Run",
        help_text="A run as team/run (or its id): the run and its checkpoints.",
    )
    target = django_filters.CharFilter(
        field_name="target_label",
        lookup_expr="icontains",
        label="About",
        help_text="Part of the name of what it is about: a run, checkpoint, host, policy…",
    )
    source = django_filters.ChoiceFilter(choices=EventSource.choices, label="Source", empty_label="Any source")
    since = django_filters.DateFilter(method="filter_since", label="From (UTC day)", widget=_DAY)
    until = django_filters.DateFilter(method="filter_until", label="To (UTC day, inclusive)", widget=_DAY)
    q = django_filters.CharFilter(method="filter_text", label="Reason or case ref", help_text="Words in either.")
    request_id = django_filters.CharFilter(field_name="request_id", label="Request id")

    class Meta:
        model = AuditEvent
        fields: list[str] = []

    def filter_run(self, queryset: QuerySet, name: str, value) -> QuerySet:
        return queryset.filter(about_run(int(value)))

    def filter_since(self, queryset: QuerySet, name: str, value) -> QuerySet:
        return queryset.filter(at__gte=_day_start(value))

    def filter_until(self, queryset: QuerySet, name: str, value) -> QuerySet:
        return queryset.filter(at__lt=_day_start(value) + timedelta(days=1))

    def filter_text(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        value = value.strip()
        if not value:
            return queryset
        return queryset.filter(Q(reason__icontains=value) | Q(case_ref__icontains=value))


def about_run(run_id: int) -> Q:
    """Events about a run itself or about any of its checkpoints (one indexed lookup each)."""
    checkpoints = Checkpoint.objects.filter(run_id=run_id).values("pk")
    return Q(target_type="run", target_id=run_id) | Q(target_type="checkpoint", target_id__in=checkpoints)
