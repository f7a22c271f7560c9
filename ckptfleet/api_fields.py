"""The API's number fields: ASCII digits only, as every other number a request carries (``ckptfleet.params``).

Django REST framework reads an integer with ``int(str(value))``, a decimal with ``Decimal`` and a primary key through
the model field's ``int()``, and each takes any Unicode digit and a boolean: ``{"checkpoint": "٣"}`` (Arabic-Indic),
``"\\uff13"`` (full width) and ``true`` were all read as a number. The fields here refuse those with the field's own
400 and otherwise behave as REST framework's. Every serializer of the project uses them, a model serializer through
``FleetModelSerializer``; tests/ckptfleet/test_api_fields.py checks that no writable number field is left out.
"""

from __future__ import annotations

import re

from django.db import models
from rest_framework import serializers

# What REST framework's own fields accept, less what only Unicode digits or a boolean would add: an optional sign,
# ASCII digits, and for an integer a ".0" that REST framework has always taken as a whole number.
_INTEGER = re.compile(r"[-+]?[0-9]+(\.0*)?")
_DECIMAL = re.compile(r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)")
_ID = re.compile(r"[0-9]{1,19}")


def _ascii_or_number(data: object, pattern: re.Pattern[str]) -> bool:
    """True when ``data`` is a JSON number (not a boolean) or a string of ASCII digits that ``pattern`` takes."""
    if isinstance(data, bool):
        return False
    if isinstance(data, int | float):
        return True
    return isinstance(data, str) and pattern.fullmatch(data) is not None


class _AsciiOnly:
    """Refuses with the field's own "invalid" what is neither a JSON number nor ``ascii_pattern``, before REST
    framework's field reads it."""

    ascii_pattern: re.Pattern[str]

    def to_internal_value(self, data):
        if not _ascii_or_number(data, self.ascii_pattern):
            self.fail("invalid")  # type: ignore[attr-defined]
        return super().to_internal_value(data)  # type: ignore[misc]


class AsciiIntegerField(_AsciiOnly, serializers.IntegerField):
    """``serializers.IntegerField`` that takes a JSON number or a string of ASCII digits, never ``true`` or ``"٣"``."""

    ascii_pattern = _INTEGER


class AsciiDecimalField(_AsciiOnly, serializers.DecimalField):
    """``serializers.DecimalField`` with ASCII digits only (``Decimal("٣")`` is 3)."""

    ascii_pattern = _DECIMAL


class AsciiFloatField(_AsciiOnly, serializers.FloatField):
    """``serializers.FloatField`` with ASCII digits only (``float("٣")`` is 3.0)."""

    ascii_pattern = _DECIMAL


class AsciiPrimaryKeyRelatedField(serializers.PrimaryKeyRelatedField):
    """``serializers.PrimaryKeyRelatedField`` that reads an id as a JSON whole number or ASCII digits only."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not (isinstance(data, int) or (isinstance(data, str) and _ID.fullmatch(data))):
            self.fail("incorrect_type", data_type=type(data).__name__)
        return super().to_internal_value(data)


class FleetModelSerializer(serializers.ModelSerializer):
    """``serializers.ModelSerializer`` whose number fields and foreign keys are the ASCII-only ones above."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.AutoField: AsciiIntegerField,
        models.BigAutoField: AsciiIntegerField,
        models.BigIntegerField: AsciiIntegerField,
        models.IntegerField: AsciiIntegerField,
        models.PositiveBigIntegerField: AsciiIntegerField,
        models.PositiveIntegerField: AsciiIntegerField,
        models.PositiveSmallIntegerField: AsciiIntegerField,
        models.SmallAutoField: AsciiIntegerField,
        models.SmallIntegerField: AsciiIntegerField,
        models.DecimalField: AsciiDecimalField,
        models.FloatField: AsciiFloatField,
    }
    serializer_related_field = AsciiPrimaryKeyRelatedField
