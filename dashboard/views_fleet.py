"""Pages of the fleet: hosts, buckets, their storage locations and what their inventories did."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from access.roles import Role, has_role, require_role
from access.scoping import restrict_runs, scoped_team_names
from audit.actor import Actor
from audit.choices import EventSource
from catalog.models import Run
from catalog.recovery_model import runs_losing_newest
from catalog.templatetags.fleet_format import bytes_iec, count, location_href
from ckptfleet.errors import DomainError
from ckptfleet.params import positive_int_param
from dashboard import selectors_fleet as selectors
from dashboard import selectors_place
from dashboard.host_forms import mark_host_from_form
from fleet.choices import InventoryStatus
from fleet.models import Host, Inventory, StorageLocation
from ingest.scan import scan_start

HOSTS_PER_PAGE = 100
RECENT_INVENTORIES = 10
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


def _silent(host: Host, now) -> bool:
    """The agent has not reported for longer than recovery allows (``catalog.recovery.unreachable_reason``)."""
    return host.last_seen_at is not None and now - host.last_seen_at > timedelta(minutes=settings.HOST_SILENT_MINUTES)


@login_required
def host_detail(request, pk: int):
    """One host: who it is, whether it reports, how full its roots are, what lives there by run and team, what that
    costs this month, and what the person may do to it. Hosts are the fleet's, not a team's: a person scoped to
    teams sees the host, and of what lives there only their teams' runs and spend."""
    host = get_object_or_404(Host, pk=pk)
    locations = list(selectors.locations_with_inventories().filter(host=host))
    selectors.attach_in_progress(locations)
    ids = [loc.pk for loc in locations]
    now = timezone.now()
    return render(
        request,
        "fleet/host_detail.html",
        {
            "host": host,
            "locations": locations,
            "failed": [loc for loc in locations if loc.last_inventory and loc.last_inventory.status == "failed"],
            "silent": _silent(host, now),
            "silent_minutes": settings.HOST_SILENT_MINUTES,
            "agent": selectors_place.agent_version(host.pk),
            "token": host.tokens.filter(revoked_at__isnull=True).order_by("-created_at").first(),
            "residents": selectors_place.residents(ids, request.user),
            "classes": selectors_place.bytes_by_class(ids, request.user),
            "recent": list(
                Inventory.objects.filter(host=host)
                .select_related("location")
                .order_by("-received_at", "-id")[:RECENT_INVENTORIES]
            ),
            "can_mark": has_role(request.user, Role.OPERATOR),
            "scoped": scoped_team_names(request.user) is not None,
            "run_filter": f"host={host.pk}",
            "location_has_inventory": any(loc.last_inventory_id for loc in locations),
            # Host down as a fleet event: the runs whose newest restorable checkpoint is only here, and the cost.
            "losses": runs_losing_newest(restrict_runs(Run.objects.all(), request.user), host=host, now=now),
        },
    )


@login_required
@require_POST
def host_state(request, pk: int):
    """Mark the host down (its copies leave the restore ranking) or up again: the same audited services as the
    recovery page and the API."""
    host = get_object_or_404(Host, pk=pk)
    mark_host_from_form(request, host)
    return redirect(reverse("fleet:host-detail", args=[host.pk]) + "#health")


@login_required
def location_detail(request, pk: int):
    """One storage location: a bucket (its settings, last scan, bytes by storage class) or a host's root (its fill,
    and a link to its host), with what lives there by run and team and this month's spend."""
    try:
        location = selectors.locations_with_inventories().select_related("bucket").get(pk=pk)
    except StorageLocation.DoesNotExist:
        raise Http404("no such storage location") from None
    selectors.attach_in_progress([location])
    bucket = getattr(location, "bucket", None)
    team_scoped = scoped_team_names(request.user) is not None
    return render(
        request,
        "fleet/location_detail.html",
        {
            "location": location,
            "bucket": bucket,
            "inv": location.last_inventory,
            "recent": selectors.location_recent_inventories(location, limit=RECENT_INVENTORIES),
            "residents": selectors_place.residents([location.pk], request.user),
            "classes": selectors_place.bytes_by_class([location.pk], request.user),
            # Stray uploads and old versions belong to no run: shown to those who see the whole fleet.
            "uploads": None if team_scoped else selectors.incomplete_uploads([location.pk]).get(location.pk),
            "versions": None if team_scoped else selectors.noncurrent_versions([location.pk]).get(location.pk),
            "silent": bool(location.host_id) and _silent(location.host, timezone.now()),
            "can_scan": bucket is not None and has_role(request.user, Role.OPERATOR),
            "scoped": team_scoped,
            "run_filter": f"location={location.pk}",
            "location_has_inventory": location.last_inventory_id is not None,
        },
    )
