"""Reading query-string parameters the way every list page does: a bad value means "not given"."""

from django.http import HttpRequest


def positive_int_param(request: HttpRequest, name: str) -> int | None:
    try:
        value = int(request.GET.get(name, ""))
    except ValueError:
        return None
    return value if value > 0 else None
