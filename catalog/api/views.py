"""Read-only API of the catalog."""

from __future__ import annotations

from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import PageNumberPagination

from catalog import selectors
from catalog.api.serializers import CheckpointSerializer, OrphanGroupSerializer, RunSerializer
from catalog.models import Checkpoint


class RunViewSet(viewsets.ReadOnlyModelViewSet):
    """Training runs with checkpoint counts, bytes and their newest step."""

    serializer_class = RunSerializer
    filterset_fields = ["team__name", "status"]

    def get_queryset(self):
        return selectors.run_list()


class CheckpointViewSet(viewsets.ReadOnlyModelViewSet):
    """Checkpoints with every present copy, its state and the reasons."""

    serializer_class = CheckpointSerializer
    filterset_fields = ["run", "importance", "step"]

    def get_queryset(self):
        copies = selectors.present_copies().select_related("location", "location__host")
        return Checkpoint.objects.select_related("run__team").prefetch_related(
            Prefetch("copies", queryset=copies, to_attr="present")
        )


class OrphanPagination(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


@extend_schema(
    parameters=[
        OpenApiParameter("kind", str, enum=selectors.OrphanKind.values, description="Only this kind."),
        OpenApiParameter("location", int, description="Only this storage location (its id)."),
    ]
)
class OrphanListView(generics.ListAPIView):
    """Orphans grouped by kind, location and run directory, with counts, bytes and ages."""

    serializer_class = OrphanGroupSerializer
    pagination_class = OrphanPagination
    filter_backends: list = []

    def get_queryset(self):
        kind = self.request.query_params.get("kind") or None
        if kind is not None and kind not in selectors.OrphanKind.values:
            raise ValidationError({"kind": f"one of {', '.join(selectors.OrphanKind.values)}"})
        location = self.request.query_params.get("location") or None
        if location is not None and not location.isdigit():
            raise ValidationError({"location": "a storage location id"})
        return selectors.orphans(kind=kind, location_id=int(location) if location else None)
