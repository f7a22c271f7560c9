"""The API's filter backend: django-filter's, with numbers and ids in ASCII digits only.

django-filter's fields read a filter's value with ``int()``, ``Decimal()`` and the model field's own ``int()``, and
each of those takes any Unicode digit: ``/api/v1/checkpoints/?run=٣`` (Arabic-Indic) and ``?run=\uff13`` (full width)
were read as run 3, although the README promises a 400 for an id that is not ASCII digits. Every number-valued
filter (a foreign key or primary key by id, an integer, a decimal) is checked here, before the filterset reads it,
with the one rule ``ckptfleet.params`` has for every number a request carries; text filters keep their Unicode.
"""

from __future__ import annotations

import re

from django import forms
from django.db import models
from django_filters.fields import BaseCSVField
from django_filters.rest_framework import DjangoFilterBackend

from ckptfleet.params import BadParameter, parse_id

_ASCII_NUMBER = re.compile(r"-?[0-9]{1,19}(\.[0-9]{1,19})?")


def _is_id_field(field: forms.Field) -> bool:
    if not isinstance(field, forms.ModelChoiceField):
        return False
    meta = field.queryset.model._meta
    target = meta.get_field(field.to_field_name) if field.to_field_name else meta.pk
    return isinstance(target, models.AutoField | models.BigAutoField | models.IntegerField)


def check_number_filters(form: forms.Form, params) -> None:
    """BadParameter naming the first number-valued filter in ``params`` whose value is not ASCII digits."""
    for name, field in form.fields.items():
        key = form.add_prefix(name)
        if key not in params:
            continue
        is_id = _is_id_field(field)
        if not is_id and not isinstance(field, forms.IntegerField | forms.DecimalField | forms.FloatField):
            continue
        for raw in params.getlist(key):
            values = raw.split(",") if isinstance(field, BaseCSVField) else [raw]
            for value in values:
                if value == "":
                    continue  # an empty filter is "not given", as django-filter reads it
                if is_id:
                    parse_id(value, key)
                elif not _ASCII_NUMBER.fullmatch(value):
                    raise BadParameter(key, "a number in ASCII digits", value)


class AsciiDigitsFilterBackend(DjangoFilterBackend):
    """``DjangoFilterBackend`` that refuses a number or id in anything but ASCII digits (400 ``bad_parameter``)."""

    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            check_number_filters(filterset.form, request.query_params)
        return filterset
