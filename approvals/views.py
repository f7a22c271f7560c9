"""The buttons of a change request: approve, reject, cancel. Each calls ``approvals.services`` and goes back.

The inbox that lists them with the deletions waiting for a second person is a dashboard page
(``dashboard.views_approvals``): deletions are above this floor.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from access.middleware import request_id_of
from approvals import services
from approvals.models import ChangeRequest
from approvals.selectors import restrict_changes
from audit.actor import Actor
from ckptfleet.errors import DomainError


def _back(request):
    target = request.POST.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=False):
        return redirect(target)
    return redirect(reverse("approvals:inbox"))


def _change(request, pk: int) -> ChangeRequest:
    change = restrict_changes(ChangeRequest.objects.filter(pk=pk), request.user).first()
    if change is None:
        raise Http404("no such change request")
    return change


@login_required
@require_POST
def approve(request, pk: int):
    change = _change(request, pk)
    try:
        services.approve_change(change=change, actor=Actor.for_request(request), request_id=request_id_of(request))
    except DomainError as exc:
        messages.error(request, f"Not approved: {exc.message}")
    else:
        messages.success(request, f"Change request {pk} approved and applied: {change.target_label}.")
    return _back(request)


@login_required
@require_POST
def reject(request, pk: int):
    change = _change(request, pk)
    try:
        services.reject_change(
            change=change,
            actor=Actor.for_request(request),
            reason=request.POST.get("reason", ""),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not rejected: {exc.message}")
    else:
        messages.success(request, f"Change request {pk} rejected: nothing of it was applied.")
    return _back(request)


@login_required
@require_POST
def cancel(request, pk: int):
    change = _change(request, pk)
    try:
        services.cancel_change(
            change=change,
            actor=Actor.for_request(request),
            reason=request.POST.get("reason", ""),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not cancelled: {exc.message}")
    else:
        messages.success(request, f"Change request {pk} cancelled.")
    return _back(request)
