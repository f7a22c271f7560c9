"""Pages of the operator actions: the forms behind the panel on run and checkpoint pages, the deletion
confirmation with its preview, and the deletions themselves.

Every form posts here; each view reads the form, calls one service and turns its answer into a
message: a refusal becomes a readable message on the page the person came from, never a traceback.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from access.middleware import request_id_of
from access.roles import Role, has_role
from access.scoping import restrict, scoped_team_names
from actions import leases, orphans, reclaim, services, softdelete
from actions.execution import last_progress
from actions.models import DeletionJob, DeletionState, Hold, HoldMode, Lease, Pin
from actions.protection import OPEN_DELETION_STATES
from audit.actor import Actor
from catalog.models import Checkpoint, CheckpointCopy, Run
from catalog.templatetags.fleet_format import bytes_iec, count
from ckptfleet.errors import DomainError
from ckptfleet.params import parse_id

ITEMS_PER_PAGE = 200
JOBS_PER_PAGE = 50


def _back(request, default: str):
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=False):
        return redirect(target)
    return redirect(default)


def _checkpoint_url(checkpoint_id: int) -> str:
    return reverse("catalog:checkpoint-detail", args=[checkpoint_id])


def _deletion_url(job_id: int) -> str:
    return reverse("actions:deletion-detail", args=[job_id])


@login_required
@require_POST
def pin(request, pk: int):
    checkpoint = get_object_or_404(restrict(Checkpoint.objects.select_related("run__team"), request.user), pk=pk)
    try:
        services.pin(
            checkpoint=checkpoint,
            reason=request.POST.get("reason", ""),
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not pinned: {exc.message}")
    else:
        messages.success(request, f"Pinned {checkpoint}: it cannot be scheduled for deletion until it is unpinned.")
    return _back(request, _checkpoint_url(pk))


@login_required
@require_POST
def lease_take(request, pk: int):
    checkpoint = get_object_or_404(restrict(Checkpoint.objects.select_related("run__team"), request.user), pk=pk)
    hours = (request.POST.get("hours") or "").strip()
    try:
        if not hours.isdigit():
            raise DomainError("for how many hours: a whole number")
        lease = leases.take(
            checkpoint=checkpoint,
            owner=request.POST.get("owner", ""),
            purpose=request.POST.get("purpose", ""),
            ttl_seconds=int(hours) * 3600,
            actor=Actor.for_request(request),
        )
    except DomainError as exc:
        messages.error(request, f"No lease taken: {exc.message}")
    else:
        messages.success(
            request,
            f"Leased {checkpoint} to {lease.owner} until {lease.expires_at:%Y-%m-%d %H:%M} UTC: nothing deletes "
            "or demotes it meanwhile.",
        )
    return _back(request, _checkpoint_url(pk))


@login_required
@require_POST
def lease_release(request, pk: int):
    current = get_object_or_404(
        Lease.objects.select_related("checkpoint__run__team").filter(
            checkpoint__in=restrict(Checkpoint.objects.all(), request.user)
        ),
        pk=pk,
    )
    try:
        leases.release(lease=current, actor=Actor.for_request(request), reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, f"Not released: {exc.message}")
    else:
        messages.success(request, f"Lease {current.pk} by {current.owner} released.")
    return _back(request, _checkpoint_url(current.checkpoint_id))


@login_required
@require_POST
def unpin(request, pk: int):
    current = get_object_or_404(restrict(Pin.objects.select_related("checkpoint__run__team"), request.user), pk=pk)
    try:
        services.unpin(
            pin=current,
            reason=request.POST.get("reason", ""),
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not unpinned: {exc.message}")
    else:
        messages.success(request, f"Unpinned {current.checkpoint}.")
    return _back(request, _checkpoint_url(current.checkpoint_id))


@login_required
@require_POST
def hold(request, pk: int):
    run = get_object_or_404(restrict(Run.objects.select_related("team"), request.user), pk=pk)
    checkpoint = None
    raw = request.POST.get("checkpoint", "")
    if raw:
        checkpoint = restrict(Checkpoint.objects.all(), request.user).filter(pk=parse_id(raw, "checkpoint")).first()
        if checkpoint is None:
            messages.error(request, "Not held: that checkpoint does not exist.")
            return _back(request, reverse("catalog:run-detail", args=[pk]))
    try:
        made = services.hold(
            run=run,
            checkpoint=checkpoint,
            reason=request.POST.get("reason", ""),
            case_ref=request.POST.get("case_ref", ""),
            mode=request.POST.get("mode", HoldMode.LEGAL),
            retain_until=request.POST.get("retain_until") or None,
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not held: {exc.message}")
    else:
        scope = str(checkpoint) if checkpoint else f"every checkpoint of {run}"
        if made.mode == HoldMode.COMPLIANCE and made.retain_until is not None:
            promise = f"Nobody can release it before {made.retain_until:%Y-%m-%d %H:%M} UTC."
        elif made.mode == HoldMode.GOVERNANCE:
            promise = "Only another person with the approver role can release it."
        else:
            promise = "Only another person can release it."
        messages.success(request, f"{made.get_mode_display()} {made.case_ref} placed on {scope}. {promise}")
    default = _checkpoint_url(checkpoint.pk) if checkpoint else reverse("catalog:run-detail", args=[pk])
    return _back(request, default)


@login_required
@require_POST
def release(request, pk: int):
    current = get_object_or_404(restrict(Hold.objects.select_related("run__team", "checkpoint"), request.user), pk=pk)
    # A governance hold an operator without the approver role releases is asked for: an approver releases it
    # from the approvals inbox.
    asking = current.mode == HoldMode.GOVERNANCE and not has_role(request.user, Role.APPROVER)
    try:
        done = (services.request_release if asking else services.release)(
            hold=current,
            reason=request.POST.get("reason", ""),
            case_ref=request.POST.get("case_ref", ""),
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"{'Release not asked for' if asking else 'Not released'}: {exc.message}")
    else:
        messages.success(
            request,
            f"Release of hold {current.case_ref} asked for (request {done.pk}): it stays in force until an approver "
            "approves it in Approvals."
            if asking
            else f"Hold {current.case_ref} released.",
        )
    return _back(request, _hold_home(current))


def _hold_home(hold: Hold) -> str:
    if hold.checkpoint_id:
        return _checkpoint_url(hold.checkpoint_id)
    return reverse("catalog:run-detail", args=[hold.run_id])


@login_required
@require_POST
def extend(request, pk: int):
    """Move a compliance hold's retain-until date later (the form beside the hold)."""
    current = get_object_or_404(restrict(Hold.objects.select_related("run__team", "checkpoint"), request.user), pk=pk)
    try:
        done = services.extend_hold(
            hold=current,
            retain_until=request.POST.get("retain_until", ""),
            reason=request.POST.get("reason", ""),
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not extended: {exc.message}")
    else:
        until = done.retain_until
        messages.success(request, f"Hold {done.case_ref} is now retained until {until:%Y-%m-%d %H:%M} UTC.")
    return _back(request, _hold_home(current))


@login_required
def schedule(request, pk: int):
    """GET: what the deletion would remove, cost and leave, with the form to confirm. POST: schedule it."""
    checkpoint = get_object_or_404(restrict(Checkpoint.objects.select_related("run__team"), request.user), pk=pk)
    raw_copy = request.POST.get("copy") if request.method == "POST" else request.GET.get("copy")
    copy = None
    if raw_copy:
        copy = (
            CheckpointCopy.objects.select_related("location")
            .filter(pk=parse_id(raw_copy, "copy"), checkpoint=checkpoint)
            .first()
        )
        if copy is None:
            messages.error(request, "That copy is not a copy of this checkpoint.")
            return redirect(_checkpoint_url(pk))
    reason = ""
    if request.method == "POST":
        reason = request.POST.get("reason", "")
        try:
            job = services.schedule_deletion(
                checkpoint=checkpoint,
                copy=copy,
                reason=reason,
                actor=Actor.for_request(request),
                request_id=request_id_of(request),
                confirm_children=request.POST.get("confirm_children") == "yes",
            )
        except DomainError as exc:
            messages.error(request, f"Not scheduled: {exc.message}")
        else:
            when = job.execute_after.strftime("%Y-%m-%d %H:%M UTC")
            if job.needs_approval:
                messages.warning(
                    request,
                    f"Deletion {job.pk} scheduled: {count(job.items_total, 'item')}, {bytes_iec(job.bytes_total)}. "
                    f"It needs {_approvals_text(job.approvals_required)} and runs no sooner than {when}.",
                )
            else:
                messages.success(
                    request,
                    f"Deletion {job.pk} scheduled: {count(job.items_total, 'item')}, {bytes_iec(job.bytes_total)}. "
                    f"It runs no sooner than {when} and can be cancelled until then.",
                )
            return redirect(_deletion_url(job.pk))
    try:
        preview = services.preview(checkpoint=checkpoint, copy=copy)
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(_checkpoint_url(pk))
    return render(
        request,
        "actions/confirm_deletion.html",
        {
            "checkpoint": checkpoint,
            "run": checkpoint.run,
            "copy": copy,
            "preview": preview,
            "reason": reason,
            "can_act": has_role(request.user, Role.OPERATOR),
        },
    )


def _approvals_text(n: int) -> str:
    return "another person's approval" if n <= 1 else f"the approvals of {n} people other than you"


@login_required
def deletion_list(request):
    show = request.GET.get("show", "open")
    jobs = restrict(
        DeletionJob.objects.select_related(
            "checkpoint__run__team", "copy__location", "orphan_location", "orphan_run__team"
        ),
        request.user,
    )
    jobs = jobs.order_by("-requested_at", "-pk")
    if show != "all":
        show = "open"
        jobs = jobs.filter(state__in=OPEN_DELETION_STATES)
    page = Paginator(jobs, JOBS_PER_PAGE).get_page(request.GET.get("page"))
    now = timezone.now()
    for job in page.object_list:
        job.progress = last_progress(job, now=now)
    return render(request, "actions/deletion_list.html", {"page_obj": page, "jobs": page.object_list, "show": show})


@login_required
def deletion_detail(request, pk: int):
    try:
        job = restrict(
            DeletionJob.objects.select_related(
                "checkpoint__run__team", "copy__location", "orphan_location", "orphan_run__team"
            ),
            request.user,
        ).get(pk=pk)
    except DeletionJob.DoesNotExist:
        raise Http404("no such deletion") from None
    items = job.items.select_related("location").order_by("location__name", "path", "pk")
    page = Paginator(items, ITEMS_PER_PAGE).get_page(request.GET.get("page"))
    user = request.user
    return render(
        request,
        "actions/deletion_detail.html",
        {
            "job": job,
            "checkpoint": job.checkpoint,
            "run": job.checkpoint.run if job.checkpoint is not None else job.orphan_run,
            "page_obj": page,
            "items": page.object_list,
            "cancellable": job.state in (DeletionState.AWAITING_APPROVAL, DeletionState.SCHEDULED)
            and (
                has_role(user, Role.OPERATOR)
                or (job.state == DeletionState.AWAITING_APPROVAL and has_role(user, Role.APPROVER))
            ),
            "approvable": job.state == DeletionState.AWAITING_APPROVAL and has_role(user, Role.APPROVER),
            # An approver who is not an operator turns down what awaits approval: "Reject", not "Cancel".
            "rejects": job.state == DeletionState.AWAITING_APPROVAL
            and has_role(user, Role.APPROVER)
            and not has_role(user, Role.OPERATOR)
            and job.requested_by_id != user.pk,
            "own_job": job.requested_by_id == user.pk,
            "approved_already": job.approved_by_id == user.pk,
            "restorable": job.state in (DeletionState.COMPLETED, DeletionState.BLOCKED)
            and job.reclaim_after is not None
            and job.reclaim_after > timezone.now()
            and has_role(user, Role.OPERATOR),
            "pending_reclaim": softdelete.pending_reclaim(job=job),
            "provable": job.state in reclaim.PROVABLE and has_role(user, Role.OPERATOR),
        },
    )


@login_required
@require_POST
def approve(request, pk: int):
    job = get_object_or_404(restrict(DeletionJob.objects.all(), request.user), pk=pk)
    try:
        services.approve(job=job, actor=Actor.for_request(request), request_id=request_id_of(request))
    except DomainError as exc:
        messages.error(request, f"Not approved: {exc.message}")
    else:
        job.refresh_from_db()
        if job.state == DeletionState.AWAITING_APPROVAL:
            messages.success(
                request,
                f"Deletion {job.pk}: your approval is recorded ({job.approvals_given} of {job.approvals_required}); "
                "its blast radius needs another approver too.",
            )
        else:
            messages.success(request, f"Deletion {job.pk} approved; it runs once its grace period is over.")
    return _back(request, _deletion_url(pk))


@login_required
@require_POST
def cancel(request, pk: int):
    job = get_object_or_404(restrict(DeletionJob.objects.all(), request.user), pk=pk)
    try:
        services.cancel(
            job=job,
            reason=request.POST.get("reason", ""),
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not cancelled: {exc.message}")
    else:
        messages.success(request, f"Deletion {job.pk} cancelled: nothing of it will be deleted.")
    return _back(request, _deletion_url(pk))


@login_required
@require_POST
def restore(request, pk: int):
    job = get_object_or_404(restrict(DeletionJob.objects.all(), request.user), pk=pk)
    try:
        softdelete.restore(
            job=job,
            reason=request.POST.get("reason", ""),
            actor=Actor.for_request(request),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not restored: {exc.message}")
    else:
        messages.success(request, f"Deletion {job.pk} is being restored: its items go back from the trash.")
    return _back(request, _deletion_url(pk))


@login_required
@require_POST
def prove(request, pk: int):
    job = get_object_or_404(restrict(DeletionJob.objects.all(), request.user), pk=pk)
    try:
        reclaim.request_proof(job=job, actor=Actor.for_request(request), request_id=request_id_of(request))
    except DomainError as exc:
        messages.error(request, f"Not checked: {exc.message}")
    else:
        messages.success(request, f"Deletion {job.pk}: the store is being listed again to prove what it freed.")
    return _back(request, _deletion_url(pk) + "#proof")


def may_clean_up_orphans(user) -> bool:
    """Whether the orphans page offers "Clean up" to ``user``: an operator who sees the whole fleet."""
    return has_role(user, Role.OPERATOR) and scoped_team_names(user) is None


def _orphan_group(params) -> dict:
    """The group's key from a form or a query: kind, location, run directory and (deleted runs) the run."""
    raw_run = (params.get("run") or "").strip()
    return {
        "kind": params.get("kind", ""),
        "location": parse_id(params.get("location"), "location"),
        "prefix": params.get("prefix", ""),
        "run": parse_id(raw_run, "run") if raw_run else None,
    }


@login_required
def orphan_cleanup(request):
    """Preview the clean-up of one orphan group (GET), and schedule it with a reason (POST)."""
    params = request.POST if request.method == "POST" else request.GET
    back = reverse("catalog:orphans")
    if not may_clean_up_orphans(request.user):
        messages.error(request, "Cleaning up orphans needs the operator role and a view of the whole fleet.")
        return redirect(back)
    try:
        group = _orphan_group(params)
        if request.method == "POST":
            job = orphans.schedule_cleanup(
                **group,
                reason=request.POST.get("reason", ""),
                actor=Actor.for_request(request),
                request_id=request_id_of(request),
            )
            waits = "awaits approval" if job.state == DeletionState.AWAITING_APPROVAL else "is scheduled"
            messages.success(
                request,
                f"Deletion {job.pk} {waits}: {count(job.items_total, 'item')} ({bytes_iec(job.bytes_total)}) frozen, "
                f"to go no sooner than {job.execute_after:%Y-%m-%d %H:%M} UTC.",
            )
            return redirect(_deletion_url(job.pk))
        preview = orphans.preview(**group, actor=Actor.for_request(request))
    except DomainError as exc:
        messages.error(request, f"Not scheduled: {exc.message}" if request.method == "POST" else exc.message)
        if request.method == "POST":
            try:
                preview = orphans.preview(**_orphan_group(params))
            except DomainError:
                return redirect(back)
        else:
            return redirect(back)
    return render(
        request,
        "actions/orphan_cleanup.html",
        {"preview": preview, "reason": request.POST.get("reason", ""), "lifecycle": orphans.lifecycle_rule(preview)},
    )
