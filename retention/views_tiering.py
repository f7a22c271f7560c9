"""Pages of tiering policies: the list with a form to create one, and a policy with its preview and runs.

Views read the request and call ``retention.tiering_policies``; the preview changes nothing.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from access.middleware import request_id_of
from access.roles import Role, has_role
from access.scoping import restrict, restrict_policies
from approvals.selectors import for_target, view_of
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Run
from ckptfleet.errors import DomainError
from retention import tiering_policies as policies
from retention.forms import NewTieringPolicyForm, TieringPolicyForm
from retention.models import TieringPolicy

FIELDS = ("name", *policies.RULE_FIELDS, "enabled")


def _rid(request) -> str:
    return getattr(request, "request_id", None) or request_id_of(request)


@login_required
def policy_list(request):
    can_edit = has_role(request.user, Role.OPERATOR)
    form = NewTieringPolicyForm(request.POST or None, user=request.user) if can_edit else None
    if request.method == "POST":
        if not can_edit:
            messages.error(request, "Creating a tiering policy needs the operator role.")
            return redirect("retention:tiering-policies")
        if form.is_valid():
            d = form.cleaned_data
            run = restrict(Run.objects.all(), request.user).filter(pk=d["run"]).first() if d.get("run") else None
            if d.get("run") and run is None:
                form.add_error("run", "No run of yours has that name or id.")
            else:
                try:
                    policy = policies.policy_create(
                        actor=Actor.for_request(request),
                        request_id=_rid(request),
                        team=d.get("team"),
                        run=run,
                        reason=d["reason"],
                        **{k: d[k] for k in FIELDS},
                    )
                except DomainError as exc:
                    form.add_error(None, exc.message)
                else:
                    note = ""
                    if d["enabled"] and not policy.enabled:
                        note = " It stays disabled until another person with the approver role approves enabling it."
                    messages.success(request, f"Tiering policy {policy.name} created.{note} Its preview is below.")
                    return redirect("retention:tiering-policy", pk=policy.pk)
    rows = restrict_policies(
        TieringPolicy.objects.select_related("team", "run__team", "target_location"), request.user
    ).order_by("name", "pk")
    return render(request, "retention/tiering_policy_list.html", {"policies": rows, "form": form})


def _visible(request, pk: int) -> TieringPolicy:
    policy = (
        restrict_policies(TieringPolicy.objects.select_related("team", "run__team", "target_location"), request.user)
        .filter(pk=pk)
        .first()
    )
    if policy is None:
        raise Http404("no such tiering policy")
    return policy


@login_required
def policy_detail(request, pk: int):
    policy = _visible(request, pk)
    can_edit = has_role(request.user, Role.OPERATOR)
    initial = {k: getattr(policy, k) for k in FIELDS}
    form = TieringPolicyForm(request.POST or None, initial=initial) if can_edit else None
    if request.method == "POST":
        if not can_edit:
            messages.error(request, "Editing a tiering policy needs the operator role.")
            return redirect("retention:tiering-policy", pk=pk)
        if form.is_valid():
            d = form.cleaned_data
            try:
                edit = policies.policy_update(
                    policy_id=policy.pk,
                    actor=Actor.for_request(request),
                    request_id=_rid(request),
                    reason=d["reason"],
                    **{k: d[k] for k in FIELDS},
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                if edit.change_request is not None:
                    messages.info(
                        request,
                        "Not applied yet: enabling a tiering policy, or changing an enabled one, waits for another "
                        f"person with the approver role (change request {edit.change_request.pk}, below).",
                    )
                elif edit.changed:
                    messages.success(request, "Policy saved.")
                else:
                    messages.info(request, "Nothing changed.")
                return redirect("retention:tiering-policy", pk=pk)
    preview = policies.preview(policy)
    history = AuditEvent.objects.filter(target_type="tiering_policy", target_id=policy.pk).order_by("-at", "-id")[:50]
    changes = [view_of(c, request.user) for c in for_target("tiering_policy", policy.pk, request.user, limit=10)]
    return render(
        request,
        "retention/tiering_policy_detail.html",
        {
            "policy": policy,
            "form": form,
            "preview": preview,
            "history": history,
            "pending": [c for c in changes if c.change.awaiting],
            "decided": [c for c in changes if not c.change.awaiting],
            "can_run": can_edit and policy.enabled,
            "back": request.path,
        },
    )


@login_required
@require_POST
def policy_run(request, pk: int):
    policy = _visible(request, pk)
    try:
        summary = policies.policy_run(
            policy_id=policy.pk,
            actor=Actor.for_request(request),
            reason=request.POST.get("reason", "") or "run now from the policy page",
            request_id=_rid(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not run: {exc.message}")
    else:
        what = "move job" if policy.action == "move" else "deletion"
        messages.success(
            request,
            f"Policy {policy.name} asked for {len(summary.asked)} {what}{'s' if len(summary.asked) != 1 else ''}; "
            f"{len(summary.skipped)} checkpoint(s) left out (reasons below).",
        )
    return redirect("retention:tiering-policy", pk=pk)
