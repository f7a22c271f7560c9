"""What a scan or an ingest left at a location: its files and its present copies, to compare before and after."""

from __future__ import annotations

from catalog.models import CheckpointCopy, ShardFile


def snapshot(location) -> list[tuple]:
    return list(
        ShardFile.objects.filter(location=location)
        .order_by("path")
        .values_list(
            "path", "size", "mtime", "checksum", "facts", "etag", "version_id", "tier", "gone_at", "changed_at"
        )
    )


def copies_at(location) -> set[tuple]:
    return {
        (c.path, c.format, c.checkpoint.step, c.state)
        for c in CheckpointCopy.objects.filter(location=location, gone_at__isnull=True).select_related("checkpoint")
    }
