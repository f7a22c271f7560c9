"""The API's number fields take ASCII digits only (ckptfleet/api_fields.py), and every serializer uses them."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import get_resolver
from rest_framework import fields, relations, serializers

from ckptfleet.api_fields import (
    AsciiDecimalField,
    AsciiFloatField,
    AsciiIntegerField,
    AsciiPrimaryKeyRelatedField,
)

NOT_ASCII = ["\u0663", "\uff13", "\u00b9", "1\u0663", True, False, " 3", "3 ", "1_0", "", None]


@pytest.mark.parametrize("value", NOT_ASCII)
def test_the_integer_field_refuses_what_is_not_ascii_digits(value):
    with pytest.raises(serializers.ValidationError):
        AsciiIntegerField(allow_null=False).run_validation(value)


@pytest.mark.parametrize(("value", "read"), [(3, 3), ("3", 3), ("-3", -3), ("+7", 7), ("3.0", 3), (3.0, 3)])
def test_the_integer_field_reads_what_rest_framework_reads(value, read):
    assert AsciiIntegerField().run_validation(value) == read


@pytest.mark.parametrize("value", ["\u0663.5", "\uff11.5", True, "1e3", "NaN", "Infinity"])
def test_the_decimal_and_float_fields_refuse_what_is_not_ascii_digits(value):
    with pytest.raises(serializers.ValidationError):
        AsciiDecimalField(max_digits=10, decimal_places=2).run_validation(value)
    with pytest.raises(serializers.ValidationError):
        AsciiFloatField().run_validation(value)


def test_the_decimal_and_float_fields_read_ascii_numbers():
    assert AsciiDecimalField(max_digits=10, decimal_places=2).run_validation("12.50") == Decimal("12.50")
    assert AsciiDecimalField(max_digits=10, decimal_places=2).run_validation(".5") == Decimal("0.5")
    assert AsciiFloatField().run_validation("-1.25") == -1.25


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["\u0663", "\uff13", True, "03x"])
def test_the_primary_key_field_refuses_what_is_not_ascii_digits(value):
    from tests.factories import RunFactory

    RunFactory(pk=3)
    from catalog.models import Run

    with pytest.raises(serializers.ValidationError):
        AsciiPrimaryKeyRelatedField(queryset=Run.objects.all()).run_validation(value)
    assert AsciiPrimaryKeyRelatedField(queryset=Run.objects.all()).run_validation("3").pk == 3


# REST framework's own classes, which read Unicode digits and booleans as numbers.
LOOSE = (fields.IntegerField, fields.DecimalField, fields.FloatField, relations.PrimaryKeyRelatedField)
STRICT = (AsciiIntegerField, AsciiDecimalField, AsciiFloatField, AsciiPrimaryKeyRelatedField)


def project_serializers() -> list[type[serializers.BaseSerializer]]:
    """Every serializer class the project defines, once every URL's view module is imported."""
    assert get_resolver().url_patterns  # the URLconf imports every app's urls, and they their views
    found, stack = set(), [serializers.BaseSerializer]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            abstract = issubclass(sub, serializers.ModelSerializer) and not hasattr(sub, "Meta")
            if not abstract and not sub.__module__.startswith(("rest_framework", "drf_spectacular", "django")):
                found.add(sub)
    return sorted(found, key=lambda cls: f"{cls.__module__}.{cls.__qualname__}")


def loose_number_fields(serializer: serializers.BaseSerializer, prefix: str = "") -> list[str]:
    """The writable fields (nested included) that are REST framework's loose number fields."""
    loose = []
    for name, field in serializer.fields.items():
        if field.read_only:
            continue
        child = getattr(field, "child", None) or getattr(field, "child_relation", None)
        for part, label in ((field, f"{prefix}{name}"), (child, f"{prefix}{name}[]")):
            if part is None:
                continue
            if isinstance(part, serializers.BaseSerializer) and hasattr(part, "fields"):
                loose += loose_number_fields(part, f"{label}.")
            elif isinstance(part, LOOSE) and not isinstance(part, STRICT):
                loose.append(f"{label} ({type(part).__name__})")
    return loose


@pytest.mark.django_db
def test_no_serializer_of_the_project_reads_a_number_with_rest_frameworks_loose_fields():
    found = project_serializers()
    assert len(found) > 40, [cls.__qualname__ for cls in found]
    loose = {}
    for cls in found:
        names = loose_number_fields(cls())
        if names:
            loose[f"{cls.__module__}.{cls.__qualname__}"] = names
    assert loose == {}, "use ckptfleet.api_fields (FleetModelSerializer, AsciiIntegerField, ...) for these"
