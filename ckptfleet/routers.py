"""The API's routers: an object's id in a URL is ASCII digits, matched by the route itself.

DRF's routers take any ``[^/.]+`` as the id, so ``/api/v1/runs/abc/placement/`` reached the view and the
query raised ValueError (a 500); here such a URL matches no route and is a 404. A viewset whose lookup is
not an id says so with its own ``lookup_value_regex``.
"""

from __future__ import annotations

from rest_framework.routers import DefaultRouter, SimpleRouter

ID_PATTERN = "[0-9]{1,19}"


class _IdLookup:
    def get_lookup_regex(self, viewset, lookup_prefix=""):
        lookup_field = getattr(viewset, "lookup_field", "pk")
        lookup_url_kwarg = getattr(viewset, "lookup_url_kwarg", None) or lookup_field
        value = getattr(viewset, "lookup_value_regex", ID_PATTERN)
        return f"(?P<{lookup_prefix}{lookup_url_kwarg}>{value})"


class IdRouter(_IdLookup, SimpleRouter):
    """SimpleRouter with ids for lookups."""


class IdDefaultRouter(_IdLookup, DefaultRouter):
    """DefaultRouter (with the API root view) with ids for lookups."""
