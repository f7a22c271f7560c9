"""Pages of promotions: the jobs list, one job with its files, the preview-then-confirm form, progress JSON.

Views read parameters and call services or selectors; the services decide and audit.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from access.roles import Role, has_role
from access.scoping import may_see_run
from audit.actor import Actor
from catalog import selectors as catalog_selectors
from catalog.models import Checkpoint, CheckpointCopy, Run
from ckptfleet.errors import DomainError
from promotion import moves, selectors, services
from promotion.choices import JobState
from promotion.forms import MoveForm, PromotionForm
from promotion.models import PromotionJob

JOBS_PER_PAGE = 50
ITEMS_PER_PAGE = 200


def progress_of(job: PromotionJob) -> dict:
    """What the page's script shows while a job runs; the API's progress says the same."""
    return {
        "id": job.pk,
        "state": job.state,
        "state_label": job.get_state_display(),
        "open": job.open,
        "method": job.method,
        "bytes_done": job.bytes_done,
        "bytes_total": job.bytes_total,
        "items_done": job.items_done,
        "items_total": job.items_total,
        "items_blocked": job.items_blocked,
        "percent": job.percent,
        "error": job.error,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "heartbeat_at": job.heartbeat_at.isoformat() if job.heartbeat_at else None,
    }


@login_required
def job_list(request):
    state = request.GET.get("state", "")
    state = state if state in JobState.values else ""
    paginator = Paginator(selectors.job_list(user=request.user, state=state), JOBS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    return render(
        request,
        "promotion/job_list.html",
        {"page_obj": page, "jobs": page.object_list, "state": state, "states": JobState.choices},
    )


@login_required
def job_detail(request, pk: int):
    try:
        job = selectors.job_detail(pk, user=request.user)
    except PromotionJob.DoesNotExist:
        raise Http404("no such promotion") from None
    paginator = Paginator(selectors.job_items(job), ITEMS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    return render(
        request,
        "promotion/job_detail.html",
        {
            "job": job,
            "checkpoint": job.checkpoint,
            "counts": selectors.item_counts(job),
            "page_obj": page,
            "items": page.object_list,
            "progress": progress_of(job),
            "can_act": has_role(request.user, Role.OPERATOR),
            "verify_deadline": moves.verify_deadline(job) if job.is_move and job.state == JobState.VERIFYING else None,
        },
    )


@login_required
def job_progress(request, pk: int):
    job = get_object_or_404(selectors.job_list(user=request.user), pk=pk)
    return JsonResponse(progress_of(job))


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = get_object_or_404(selectors.job_list(user=request.user), pk=pk)
    try:
        services.cancel(
            job=job,
            actor=Actor.for_request(request),
            reason=request.POST.get("reason", ""),
            request_id=request.request_id,
        )
    except DomainError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Promotion #{job.pk} cancelled. Objects already restored or copied stay.")
    return redirect("promotion:job-detail", pk=job.pk)


def requested_message(job: PromotionJob, noun: str) -> str:
    """The flash after asking: where the job stands now. With tasks run in-process (the embedded default) it may
    already have finished by the time the page is drawn, and "requested" would then be wrong."""
    job.refresh_from_db(fields=["state", "error"])
    if job.state == JobState.COMPLETED:
        return f"{noun} #{job.pk} completed."
    if job.state == JobState.FAILED:
        return f"{noun} #{job.pk} failed: {job.error}" if job.error else f"{noun} #{job.pk} failed."
    if job.state == JobState.REQUESTED:
        return f"{noun} #{job.pk} requested: {job.get_method_display().lower()}."
    return f"{noun} #{job.pk} requested; now {job.get_state_display().lower()}."


@login_required
def promote(request, pk: int):
    """GET: what the promotion will do (the plan), with a confirm button. POST: ask for it."""
    try:
        checkpoint = catalog_selectors.checkpoint_with_run(pk)
    except Checkpoint.DoesNotExist:
        raise Http404("no such checkpoint") from None
    if not may_see_run(request.user, checkpoint.run):
        raise Http404("no such checkpoint")
    data = request.POST if request.method == "POST" else request.GET
    form = PromotionForm(data)
    context = {"checkpoint": checkpoint, "run": checkpoint.run, "form": form, "plan": None, "error": ""}
    if not form.is_valid():
        context["error"] = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        return render(request, "promotion/promote.html", context, status=400)
    values = form.cleaned_data
    try:
        if values["copy"]:
            copy = CheckpointCopy.objects.select_related("location", "checkpoint").filter(pk=values["copy"]).first()
            if copy is None or copy.checkpoint_id != checkpoint.pk:
                raise DomainError(f"that copy is not a copy of {checkpoint}")
        else:
            copy = services.best_source(checkpoint, values["target"])
        kwargs = {
            "target_location": values["target"],
            "target_storage_class": values["storage_class"] or "",
            "restore_days": values["restore_days"] or 7,
            "restore_tier": values["restore_tier"] or "Standard",
        }
        if request.method == "POST":
            job = services.promote(
                copy=copy,
                actor=Actor.for_request(request),
                reason=values["reason"],
                request_id=request.request_id,
                **kwargs,
            )
            messages.success(request, requested_message(job, "Promotion"))
            return redirect("promotion:job-detail", pk=job.pk)
        context["plan"] = services.promotion_plan(copy=copy, **kwargs)
    except DomainError as exc:
        context["error"] = exc.message
        return render(request, "promotion/promote.html", context, status=exc.http_status)
    context["can_act"] = has_role(request.user, Role.OPERATOR)
    context["confirm_url"] = reverse("promotion:promote", args=[checkpoint.pk])
    return render(request, "promotion/promote.html", context)


def _move_page(request, *, run: Run, checkpoint: Checkpoint | None):
    """GET: the plan of a move (preview). POST: ask for it. One checkpoint, or a run's filtered checkpoints."""
    if not may_see_run(request.user, run):
        raise Http404("no such run")
    data = request.POST if request.method == "POST" else request.GET
    form = MoveForm(data)
    here = (
        reverse("promotion:move-checkpoint", args=[checkpoint.pk])
        if checkpoint
        else reverse("promotion:move-run", args=[run.pk])
    )
    context = {"run": run, "checkpoint": checkpoint, "form": form, "plan": None, "error": "", "confirm_url": here}
    if not form.is_valid():
        context["error"] = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        return render(request, "promotion/move.html", context, status=400)
    values = form.cleaned_data
    try:
        chosen = selectors.move_candidates(
            user=request.user,
            checkpoint_ids=[checkpoint.pk] if checkpoint else None,
            run_id=None if checkpoint else run.pk,
            older_than_days=values["older_than_days"],
            importance=values["importance"] or None,
        )
        kwargs = {
            "checkpoints": chosen,
            "target_location": values["target"],
            "target_storage_class": values["storage_class"],
            "source_location": values["source"],
        }
        if request.method == "POST":
            jobs = moves.request_move(
                actor=Actor.for_request(request), reason=values["reason"], request_id=request.request_id, **kwargs
            )
            if len(jobs) == 1:
                messages.success(request, requested_message(jobs[0], jobs[0].get_direction_display()))
                return redirect("promotion:job-detail", pk=jobs[0].pk)
            messages.success(request, f"{len(jobs)} moves requested: " + ", ".join(f"#{j.pk}" for j in jobs) + ".")
            return redirect(reverse("jobs:list") + "?kind=promotion")
        context["plan"] = moves.move_plan(**kwargs)
    except DomainError as exc:
        context["error"] = exc.message
        return render(request, "promotion/move.html", context, status=exc.http_status)
    context["can_act"] = has_role(request.user, Role.OPERATOR)
    return render(request, "promotion/move.html", context)


@login_required
def move_checkpoint(request, pk: int):
    try:
        checkpoint = catalog_selectors.checkpoint_with_run(pk)
    except Checkpoint.DoesNotExist:
        raise Http404("no such checkpoint") from None
    return _move_page(request, run=checkpoint.run, checkpoint=checkpoint)


@login_required
def move_run(request, pk: int):
    run = get_object_or_404(Run.objects.select_related("team"), pk=pk)
    return _move_page(request, run=run, checkpoint=None)
