"""Read-only API of the catalog."""

from __future__ import annotations

from django.db.models import Prefetch
from rest_framework import viewsets

from catalog import selectors
from catalog.api.serializers import CheckpointSerializer, RunSerializer
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
        copies = selectors.present_copies().select_related("location")
        return Checkpoint.objects.select_related("run__team").prefetch_related(
            Prefetch("copies", queryset=copies, to_attr="present")
        )
