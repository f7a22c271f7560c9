"""Provenance of the copies promotions and moves write: which copy each was made from, and when.

The ingest asks (``catalog.hooks.provenance``) when copies appear at a location; a job that wrote there keeps the
same relative path at its target as at its source, so the copy at that path of its target location was made from
its source copy. Only a job that began writing counts (``started_at``), whatever its end: a failed or cancelled
move's objects were still written from its source. A class change in place writes no other copy.
"""

from __future__ import annotations

from typing import Any

from catalog.hooks import Made
from promotion.choices import Direction
from promotion.models import PromotionJob

# Paths asked about per query: a location's first inventory may find thousands of copies at once.
PATHS_PER_QUERY = 500


def copies_written(location: Any, paths: list[str]) -> dict[str, Made]:
    """{path: Made} for the paths of ``location`` that a promotion or move wrote from another copy (the newest job
    that wrote each path wins)."""
    out: dict[str, Made] = {}
    jobs = PromotionJob.objects.filter(target_location_id=location.pk, in_place=False, started_at__isnull=False)
    if not paths or not jobs.exists():
        return out
    for i in range(0, len(paths), PATHS_PER_QUERY):
        rows = (
            jobs.filter(source_copy__path__in=paths[i : i + PATHS_PER_QUERY])
            .exclude(source_copy__location_id=location.pk)
            .order_by("started_at", "pk")
            .values_list("pk", "direction", "source_copy_id", "source_copy__path", "started_at")
        )
        for pk, direction, source_id, path, started_at in rows:
            out[path] = Made(source_id=source_id, at=started_at, by=f"{Direction(direction).label.lower()} #{pk}")
    return out
