"""Reads of the fleet, for pages: hosts, their locations and what their inventories did."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import OuterRef, Prefetch, Q, QuerySet, Subquery

from catalog.models import ShardFile
from fleet.choices import InventoryStatus
from fleet.models import Host, Inventory, StorageLocation

IN_PROGRESS = (InventoryStatus.RECEIVED, InventoryStatus.PROCESSING)


def locations_with_inventories() -> QuerySet[StorageLocation]:
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


def attach_in_progress(locations: Iterable[StorageLocation]) -> None:
    """Set ``in_progress`` on each location: its newest inventory if that one is not finished yet."""
    locations = list(locations)
    wanted = {
        loc.newest_inventory_id
        for loc in locations
        if loc.newest_inventory_id and loc.newest_inventory_id != loc.last_inventory_id
    }
    found = Inventory.objects.filter(pk__in=wanted, status__in=IN_PROGRESS).in_bulk() if wanted else {}
    for loc in locations:
        loc.in_progress = found.get(loc.newest_inventory_id)


def host_list(*, q: str = "", host_id: int | None = None) -> QuerySet[Host]:
    """Hosts by name, each with its locations (``host.located``) and their inventories."""
    hosts = Host.objects.order_by("name")
    if q:
        hosts = hosts.filter(Q(name__icontains=q) | Q(site__icontains=q) | Q(region__icontains=q))
    if host_id is not None:
        hosts = hosts.filter(pk=host_id)
    return hosts.prefetch_related(Prefetch("locations", queryset=locations_with_inventories(), to_attr="located"))


def shared_locations() -> list[StorageLocation]:
    """Locations that belong to no host (buckets, shared mounts), with their inventories."""
    return list(locations_with_inventories().filter(host__isnull=True))


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
