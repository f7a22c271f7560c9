"""Reading numbers from request input (query strings, form fields, URL parts): ASCII digits only, or a 400.

``str.isdigit`` and ``int`` take more than an id: ``"¹".isdigit()`` is true and ``int("¹")`` then raises
(a 500), ``int(" 7 ")``, ``int("1_0")`` and ``int("٣")`` succeed, and a 30-digit id overflows PostgreSQL's
bigint. Every number a request carries goes through ``whole_number``; a bad one is refused with a 400 that
names the parameter (``BadParameter``, answered by the API's exception handler and, for pages, by
``ckptfleet.middleware.RequestGuardMiddleware``). The one exception is a list page's filter (``lenient_id``,
``positive_int_param``), where a bad value has always meant "not given".
"""

from __future__ import annotations

import re

from django.http import HttpRequest

from ckptfleet.errors import DomainError

_ASCII_DIGITS = re.compile(r"[0-9]{1,19}")
ID_MAX = 2**63 - 1


class BadParameter(DomainError):
    """A request parameter that is not what it must be; the message names it."""

    code = "bad_parameter"

    def __init__(self, name: str, must_be: str, value: object) -> None:
        shown = repr(value) if len(str(value)) <= 40 else repr(str(value)[:40]) + "..."
        super().__init__(f"{name} must be {must_be}, not {shown}")
        self.name = name


def whole_number(raw: object, name: str, *, minimum: int = 0, maximum: int = ID_MAX) -> int:
    """``raw`` as an int when it is ASCII digits within [minimum, maximum], else BadParameter naming ``name``."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and _ASCII_DIGITS.fullmatch(raw):
        value = int(raw)
    else:
        value = None
    if value is None or not minimum <= value <= maximum:
        raise BadParameter(name, f"a whole number from {minimum} to {maximum}", raw)
    return value


def parse_id(raw: object, name: str) -> int:
    """An object id (1 to 2**63-1) from request input, or BadParameter."""
    try:
        return whole_number(raw, name, minimum=1)
    except BadParameter:
        raise BadParameter(name, "an id (a whole number from 1)", raw) from None


def optional_id(raw: object, name: str) -> int | None:
    """None when ``raw`` is absent or empty, else ``parse_id``."""
    return None if raw is None or raw == "" else parse_id(raw, name)


def id_param(request: HttpRequest, name: str) -> int | None:
    """The query parameter ``name`` as an id, None when absent or empty; anything else is BadParameter."""
    return optional_id(request.GET.get(name), name)


def lenient_id(raw: object) -> int | None:
    """A list page's filter: an id when ``raw`` is one, else None ("not given"), as the pages' filters are."""
    try:
        return optional_id(raw, "")
    except BadParameter:
        return None


def positive_int_param(request: HttpRequest, name: str) -> int | None:
    """A list page's filter from the query string: an id, or None when absent or not an id."""
    return lenient_id(request.GET.get(name))
