"""API pagination: cursors on the primary key, stable under inserts and cheap at any depth."""

from rest_framework.pagination import CursorPagination


class IdCursorPagination(CursorPagination):
    ordering = "-id"
    page_size_query_param = "page_size"
    max_page_size = 1000
