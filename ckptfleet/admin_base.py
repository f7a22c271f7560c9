"""What every app's admin shares: read-only admins (writes belong to services, which audit them) and a paginator
that does not count tens of millions of rows on every page load."""

from __future__ import annotations

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.utils.functional import cached_property


class ReadOnlyAdmin(admin.ModelAdmin):
    """Show and search only: writes belong to services, which audit them."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class EstimatedCountPaginator(Paginator):
    """Exact counts, except for an unfiltered table on PostgreSQL, where the planner's estimate is used.

    The admin counts the list on every page load; COUNT(*) over tens of millions of shard files
    costs seconds and tells nobody anything the estimate does not.
    """

    @cached_property
    def count(self) -> int:
        query = getattr(self.object_list, "query", None)
        if connection.vendor == "postgresql" and query is not None and not query.where:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [self.object_list.model._meta.db_table],
                )
                row = cursor.fetchone()
            if row and row[0] >= 0:
                return int(row[0])
        return super().count
