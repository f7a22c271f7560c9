"""Reads of the fleet, for pages: hosts, buckets, their locations and what their inventories did; and whether
a root is a host's own."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from django.db.models import Count, F, OuterRef, Prefetch, Q, QuerySet, Subquery, Sum

from catalog.models import ShardFile
from fleet.choices import DEFAULT_STORAGE_CLASS_TIERS, InventoryStatus, Tier
from fleet.models import Bucket, Host, Inventory, MultipartUpload, ObjectVersion, StorageLocation
from spend.models import UsageDaily, UsageState

if TYPE_CHECKING:  # the stubs' helper (a dev dependency) for a model instance with annotations
    from django_stubs_ext import WithAnnotations

IN_PROGRESS = (InventoryStatus.RECEIVED, InventoryStatus.PROCESSING)


class _Newest(TypedDict):
    newest_inventory_id: int | None


def locations_with_inventories() -> QuerySet[WithAnnotations[StorageLocation, _Newest]]:
    """Locations with their last finished inventory and the id of their newest one of any status.

    ``last_inventory`` is only moved when an inventory is applied or fails; the newest one may still
    be waiting or processing. The correlated subquery walks the (location, -received_at) index and
    stops at the first row, so it stays cheap however long a location's history is.
    """
    newest = Inventory.objects.filter(location=OuterRef("pk")).order_by("-received_at", "-id").values("id")[:1]
    return (
        StorageLocation.objects.select_related("last_inventory", "host")
        .annotate(newest_inventory_id=Subquery(newest))
        .order_by("name")
    )


def attach_in_progress(locations: Iterable[WithAnnotations[StorageLocation, _Newest]]) -> None:
    """Set ``in_progress`` on each location: its newest inventory if that one is not finished yet."""
    locations = list(locations)
    wanted = {
        loc.newest_inventory_id
        for loc in locations
        if loc.newest_inventory_id and loc.newest_inventory_id != loc.last_inventory_id
    }
    found = Inventory.objects.filter(pk__in=wanted, status__in=IN_PROGRESS).in_bulk() if wanted else {}
    for loc in locations:
        # An attribute for the page, on the instance itself: not a field, so the stubs do not know it.
        loc.in_progress = found.get(loc.newest_inventory_id)  # type: ignore[attr-defined]


def host_list(*, q: str = "", host_id: int | None = None) -> QuerySet[Host]:
    """Hosts by name, each with its locations (``host.located``) and their inventories."""
    hosts = Host.objects.order_by("name")
    if q:
        hosts = hosts.filter(Q(name__icontains=q) | Q(site__icontains=q) | Q(region__icontains=q))
    if host_id is not None:
        hosts = hosts.filter(pk=host_id)
    return hosts.prefetch_related(Prefetch("locations", queryset=locations_with_inventories(), to_attr="located"))


def shared_locations() -> list[WithAnnotations[StorageLocation, _Newest]]:
    """Locations that belong to no host and have no bucket settings (shared mounts), with their inventories."""
    return list(locations_with_inventories().filter(host__isnull=True, bucket__isnull=True))


@dataclass(frozen=True)
class TierBytes:
    """The present files of one location on one tier."""

    tier: str
    label: str
    bytes: int
    files: int


@dataclass(frozen=True)
class Uploads:
    """The incomplete multipart uploads of one location the last scan found; ``bytes`` None when unknown."""

    count: int
    bytes: int | None


@dataclass(frozen=True)
class Versions:
    """The non-current versions of one versioned bucket the last scan found: billed bytes no listing shows."""

    count: int
    bytes: int
    delete_markers: int


_TIER_ORDER = {value: i for i, value in enumerate(Tier.values)}


def bucket_locations() -> list[WithAnnotations[StorageLocation, _Newest]]:
    """Bucket locations with their settings (``loc.bucket``), last finished and newest scan, bytes by tier
    (``loc.tiers``), incomplete multipart uploads (``loc.uploads``) and non-current versions
    (``loc.versions``): five queries for any number of buckets.
    """
    locations = list(locations_with_inventories().filter(bucket__isnull=False).select_related("bucket"))
    ids = [loc.pk for loc in locations]
    tiers = bytes_by_tier(ids)
    uploads = incomplete_uploads(ids)
    versions = noncurrent_versions(ids)
    for loc in locations:
        # Attributes for the page, on the instances themselves: not fields, so the stubs do not know them.
        loc.tiers = tiers.get(loc.pk, [])  # type: ignore[attr-defined]
        loc.uploads = uploads.get(loc.pk)  # type: ignore[attr-defined]
        loc.versions = versions.get(loc.pk)  # type: ignore[attr-defined]
    return locations


def bytes_by_tier(location_ids: Iterable[int]) -> dict[int, list[TierBytes]]:
    """Present files per location and tier, hottest tier first, from the usage rollup: one small grouped query.

    Reads the location's ``UsageDaily`` rows of its latest rolled-up day (``UsageCursor.day``), which
    the ingest rewrites from the present files in the same transaction as every applied inventory or
    scan, so the page costs the same at a thousand files or a hundred million. Incomplete multipart
    uploads and non-current versions are rolled up too but are no present files; they are shown on their own.
    """
    ids = list(location_ids)
    if not ids:
        return {}
    rows = (
        UsageDaily.objects.filter(location_id__in=ids, day=F("location__usage_cursor__day"))
        .exclude(state__in=[UsageState.MULTIPART, UsageState.NONCURRENT])
        .values("location_id", "tier")
        .annotate(total=Sum("bytes"), file_total=Sum("files"))
        .order_by()
    )
    sums: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for row in rows:
        acc = sums[row["location_id"]][row["tier"]]
        acc[0] += row["total"] or 0
        acc[1] += row["file_total"] or 0
    labels = dict(Tier.choices)
    return {
        pk: [
            TierBytes(tier=t, label=labels.get(t, t or "no tier"), bytes=b, files=f)
            for t, (b, f) in sorted(by_tier.items(), key=lambda item: (_TIER_ORDER.get(item[0], 99), item[0]))
        ]
        for pk, by_tier in sums.items()
    }


def incomplete_uploads(location_ids: Iterable[int]) -> dict[int, Uploads]:
    """Incomplete multipart uploads still present per location, in one grouped query."""
    ids = list(location_ids)
    if not ids:
        return {}
    rows = (
        MultipartUpload.objects.filter(location_id__in=ids, gone_at__isnull=True)
        .values("location_id")
        .annotate(uploads=Count("pk"), parts_bytes=Sum("bytes"), unknown=Count("pk", filter=Q(bytes__isnull=True)))
        .order_by()
    )
    return {
        r["location_id"]: Uploads(count=r["uploads"], bytes=None if r["unknown"] else (r["parts_bytes"] or 0))
        for r in rows
    }


def noncurrent_versions(location_ids: Iterable[int]) -> dict[int, Versions]:
    """Non-current versions and delete markers still present per location, in one grouped query."""
    ids = list(location_ids)
    if not ids:
        return {}
    rows = (
        ObjectVersion.objects.filter(location_id__in=ids, gone_at__isnull=True)
        .values("location_id")
        .annotate(
            versions=Count("pk", filter=Q(delete_marker=False)),
            total=Sum("size"),
            markers=Count("pk", filter=Q(delete_marker=True)),
        )
        .order_by()
    )
    return {
        r["location_id"]: Versions(count=r["versions"], bytes=r["total"] or 0, delete_markers=r["markers"])
        for r in rows
    }


def failed_location_count() -> int:
    """How many locations' last finished inventory failed."""
    return StorageLocation.objects.filter(last_inventory__status=InventoryStatus.FAILED).count()


def inventory_detail(pk: int) -> Inventory:
    """One inventory with its location and host; raises ``Inventory.DoesNotExist``."""
    return Inventory.objects.select_related("location", "location__host", "host").get(pk=pk)


def location_recent_inventories(location: StorageLocation, *, limit: int = 20) -> list[Inventory]:
    """The newest inventories of a location, newest first."""
    return list(
        Inventory.objects.filter(location=location)
        .order_by("-received_at", "-id")
        .only(
            "pk",
            "location_id",
            "status",
            "received_at",
            "finished_at",
            "started_at",
            "files_count",
            "bytes_total",
            "files_added",
            "files_changed",
            "files_gone",
            "error_line",
        )[:limit]
    )


def files_changed_by(inventory: Inventory, *, limit: int) -> list[ShardFile]:
    """Up to ``limit`` files whose latest change (added, changed or gone) this inventory recorded.

    A sample, not the first ones by path: sorting a first inventory's millions of files to show a
    hundred would cost more than the page is worth. Sorted by path once fetched.
    """
    sample = (
        ShardFile.objects.filter(changed_by=inventory)
        .only("pk", "path", "size", "mtime", "gone_at", "first_seen_at", "changed_at", "location_id")
        .order_by()[:limit]
    )
    return sorted(sample, key=lambda f: f.path)


@dataclass(frozen=True)
class PlaceChoices:
    """What the runs list offers to filter by place: hosts, locations, bucket names and storage classes."""

    hosts: list[tuple[int, str]]
    locations: list[tuple[int, str]]
    buckets: list[str]
    storage_classes: list[str]


def place_choices() -> PlaceChoices:
    """Three small queries over the fleet's registrations (hosts, locations, buckets), not over files; the storage
    classes are those the store names (``DEFAULT_STORAGE_CLASS_TIERS``) and those a bucket maps itself."""
    hosts = list(Host.objects.order_by("name").values_list("pk", "name"))
    locations = list(StorageLocation.objects.order_by("name").values_list("pk", "name"))
    buckets = sorted(set(Bucket.objects.values_list("bucket_name", flat=True)))
    classes = set(DEFAULT_STORAGE_CLASS_TIERS)
    for overrides in Bucket.objects.exclude(storage_class_tiers={}).values_list("storage_class_tiers", flat=True):
        if isinstance(overrides, dict):
            classes.update(str(k).upper() for k in overrides)
    return PlaceChoices(hosts=hosts, locations=locations, buckets=buckets, storage_classes=sorted(classes))
