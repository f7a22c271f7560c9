"""Pages of the fleet: hosts, their storage locations and what their inventories did."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import render

from ckptfleet.params import positive_int_param
from fleet import selectors
from fleet.models import Inventory

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
    shared = [] if filtered else selectors.shared_locations()
    selectors.attach_in_progress([loc for host in hosts for loc in host.located] + shared)
    return render(
        request,
        "fleet/overview.html",
        {
            "page_obj": page,
            "hosts": hosts,
            "shared": shared,
            "q": q,
            "host_id": host_id,
            "filtered": filtered,
            "host_count": paginator.count,
            "failed_count": selectors.failed_location_count(),
            "fleet_is_empty": paginator.count == 0 and not shared and not filtered,
        },
    )


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
