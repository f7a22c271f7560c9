"""Pages of the fleet: hosts, buckets, their storage locations and what their inventories did."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from access.roles import Role, require_role
from audit.actor import Actor
from audit.choices import EventSource
from catalog.templatetags.fleet_format import bytes_iec, count, location_href
from ckptfleet.errors import DomainError
from ckptfleet.params import positive_int_param
from dashboard import selectors_fleet as selectors
from fleet.choices import InventoryStatus
from fleet.models import Inventory, StorageLocation
from ingest.scan import scan_start

HOSTS_PER_PAGE = 100
CHANGED_FILES_SHOWN = 100


@login_required
def fleet_overview(request):
    q = request.GET.get("q", "").strip()[:200]
    host_id = positive_int_param(request, "host")
    filtered = bool(q or host_id)
    paginator = Paginator(selectors.host_list(q=q, host_id=host_id), HOSTS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    hosts = list(page.object_list)
    buckets = [] if filtered else selectors.bucket_locations()
    shared = [] if filtered else selectors.shared_locations()
    selectors.attach_in_progress([loc for host in hosts for loc in host.located] + buckets + shared)
    return render(
        request,
        "fleet/overview.html",
        {
            "page_obj": page,
            "hosts": hosts,
            "buckets": buckets,
            "shared": shared,
            "q": q,
            "host_id": host_id,
            "filtered": filtered,
            "host_count": paginator.count,
            "failed_count": selectors.failed_location_count(),
            "fleet_is_empty": paginator.count == 0 and not buckets and not shared and not filtered,
        },
    )


@login_required
@require_POST
def location_scan(request, pk: int):
    """Scan a bucket now (the form behind the button; with JavaScript the button uses the API and polls)."""
    location = get_object_or_404(StorageLocation, pk=pk)
    user = request.user
    actor = Actor.person(user, EventSource.UI)
    try:
        require_role(user, Role.OPERATOR, doing=f"Scanning {location.name}", target_type="location", target_id=pk)
        inventory = scan_start(location=location, actor=actor)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(location_href(location))
    # Without a worker (the embedded default) the scan has run by now; with one it is queued.
    inventory.refresh_from_db(fields=["status", "files_count", "bytes_total", "error"])
    if inventory.status == InventoryStatus.APPLIED:
        messages.success(
            request,
            f"Scan #{inventory.pk} of {location.name} applied: {count(inventory.files_count, 'object')}, "
            f"{bytes_iec(inventory.bytes_total)}.",
        )
    elif inventory.status == InventoryStatus.FAILED:
        messages.error(request, f"Scan #{inventory.pk} of {location.name} failed: {inventory.error}")
    else:
        messages.info(request, f"Scan #{inventory.pk} of {location.name} started; reload to follow it.")
    return redirect(location_href(location))


@login_required
def inventory_detail(request, pk: int):
    try:
        inventory = selectors.inventory_detail(pk)
    except Inventory.DoesNotExist:
        raise Http404("no such inventory") from None
    return render(
        request,
        "fleet/inventory_detail.html",
        {
            "inventory": inventory,
            "location": inventory.location,
            "recent": selectors.location_recent_inventories(inventory.location),
            "changed_files": selectors.files_changed_by(inventory, limit=CHANGED_FILES_SHOWN),
            "changed_files_limit": CHANGED_FILES_SHOWN,
        },
    )
