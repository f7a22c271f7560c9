"""Pages of retention: the simulator, the tiering what-if, and retention policies with their dry runs.

Views read the request, call ``retention.selectors`` / ``retention.tiering`` / ``retention.services``
and render. Simulating changes nothing, so the simulator and the what-if are GET forms.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from access.middleware import request_id_of
from access.roles import Role, has_role
from access.scoping import restrict, restrict_policies, visible_team_names
from approvals.selectors import for_target, view_of
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Run, Team
from ckptfleet.errors import DomainError
from retention import services
from retention.forms import MoveForm, NewPolicyForm, PolicyForm, RulesForm
from retention.models import RetentionPolicy
from retention.selectors import Scope, simulate
from retention.tiering import Move, tiering_whatif

DETAIL_LIMIT = 2000  # checkpoint decisions listed on the page; beyond, the per-run summary and the API


def _scope(data: dict, user) -> tuple[Scope, Team | None, Run | None]:
    run = None
    names = visible_team_names(user)  # a scoped person simulates over their teams' runs (access.scoping)
    if data.get("run"):
        run = restrict(Run.objects.select_related("team"), user).filter(pk=data["run"]).first()
        if run is None:
            raise Http404("no such run")
        return Scope(run_id=run.pk, team_names=names), run.team, run
    team = data.get("team")
    return Scope(team_id=team.pk if team else None, team_names=names), team, None


def _detail_shown(sim) -> bool:
    return sum(len(r.plan.decisions) for r in sim.runs) <= DETAIL_LIMIT


@login_required
def simulator(request):
    form = RulesForm.from_request(request)
    context = {"form": form, "sim": None, "team": None, "run": None}
    if form.is_valid():
        scope, team, run = _scope(form.cleaned_data, request.user)
        sim = simulate(rules=form.rules(), scope=scope)
        context.update(sim=sim, team=team, run=run, detail=_detail_shown(sim), query=request.GET.urlencode())
    return render(request, "retention/simulator.html", context)


@login_required
def tiering(request):
    form = MoveForm.from_request(request)
    context = {"form": form, "whatif": None, "team": None, "run": None}
    if form.is_valid():
        d = form.cleaned_data
        scope, team, run = _scope(d, request.user)
        move = Move(
            to_class=d["to_class"],
            from_tier=d["from_tier"],
            from_class=d["from_class"],
            finished_only=d["finished_only"],
            to_location_id=d["to_location"].pk if d["to_location"] else None,
            scope=scope,
        )
        try:
            context["whatif"] = tiering_whatif(move=move)
        except DomainError as exc:
            form.add_error(None, exc.message)
        context.update(team=team, run=run, query=request.GET.urlencode())
    return render(request, "retention/tiering.html", context)


@login_required
def policy_list(request):
    can_edit = has_role(request.user, Role.OPERATOR)
    form = None
    if can_edit:
        form = NewPolicyForm(
            request.POST or None,
            initial={"team": request.GET.get("team"), "run": request.GET.get("run")},
            user=request.user,  # a scoped person: their own teams only
        )
    if request.method == "POST":
        if not can_edit:
            messages.error(request, "Creating a retention policy needs the operator role.")
            return redirect("retention:policies")
        if form.is_valid():
            d = form.cleaned_data
            run = restrict(Run.objects.all(), request.user).filter(pk=d["run"]).first() if d.get("run") else None
            if d.get("run") and run is None:
                form.add_error("run", "No run of yours has that name or id.")
            else:
                try:
                    policy = services.policy_create(
                        actor=Actor.for_request(request),
                        request_id=getattr(request, "request_id", None) or request_id_of(request),
                        name=d["name"],
                        team=d.get("team"),
                        run=run,
                        keep_last=d["keep_last"],
                        keep_every=d["keep_every"],
                        keep_milestones=d["keep_milestones"],
                        keep_critical=d["keep_critical"],
                        keep_stepless=d["keep_stepless"],
                        enabled=d["enabled"],
                        reason=d["reason"],
                    )
                except DomainError as exc:
                    form.add_error(None, exc.message)
                else:
                    note = ""
                    if d["enabled"] and not policy.enabled:
                        note = (
                            " It stays disabled until another person with the approver role approves enabling it "
                            "(below)."
                        )
                    messages.success(request, f"Policy {policy.name} created.{note} Its dry run is below.")
                    return redirect("retention:policy", pk=policy.pk)
    policies = restrict_policies(RetentionPolicy.objects.select_related("team", "run__team"), request.user)
    policies = policies.order_by("name", "pk")
    return render(request, "retention/policy_list.html", {"policies": policies, "form": form})


def _visible_policy(request, pk: int) -> RetentionPolicy:
    policy = restrict_policies(RetentionPolicy.objects.select_related("team", "run__team"), request.user)
    policy = policy.filter(pk=pk).first()
    if policy is None:
        raise Http404("no such policy")
    return policy


@login_required
def policy_detail(request, pk: int):
    policy = _visible_policy(request, pk)
    can_edit = has_role(request.user, Role.OPERATOR)
    initial = {k: getattr(policy, k) for k in services.EDITABLE}
    form = PolicyForm(request.POST or None, initial=initial) if can_edit else None
    if request.method == "POST":
        if not can_edit:
            messages.error(request, "Editing a retention policy needs the operator role.")
            return redirect("retention:policy", pk=pk)
        if form.is_valid():
            d = form.cleaned_data
            try:
                edit = services.policy_update(
                    policy_id=policy.pk,
                    actor=Actor.for_request(request),
                    request_id=getattr(request, "request_id", None) or request_id_of(request),
                    reason=d["reason"],
                    **{k: d[k] for k in services.EDITABLE},
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                if edit.change_request is not None:
                    messages.info(
                        request,
                        f"Not applied yet: this change can delete more, so it waits for another person with the "
                        f"approver role (change request {edit.change_request.pk}, below).",
                    )
                elif edit.changed:
                    messages.success(request, "Policy saved.")
                else:
                    messages.info(request, "Nothing changed.")
                return redirect("retention:policy", pk=pk)
    sim = services.policy_dry_run(policy, team_names=visible_team_names(request.user))
    history = AuditEvent.objects.filter(target_type="retention_policy", target_id=policy.pk).order_by("-at", "-id")[:50]
    changes = [view_of(c, request.user) for c in for_target("retention_policy", policy.pk, request.user, limit=10)]
    return render(
        request,
        "retention/policy_detail.html",
        {
            "policy": policy,
            "form": form,
            "sim": sim,
            "detail": _detail_shown(sim),
            "history": history,
            "changes": changes,
            "pending": [c for c in changes if c.change.awaiting],
            "decided": [c for c in changes if not c.change.awaiting],
            "can_lock": has_role(request.user, Role.APPROVER),
            "back": reverse("retention:policy", args=[policy.pk]),
        },
    )


@login_required
@require_POST
def policy_lock(request, pk: int):
    policy = _visible_policy(request, pk)
    unlock = request.POST.get("do") == "unlock"
    service = services.policy_unlock if unlock else services.policy_lock
    try:
        service(
            policy_id=policy.pk,
            actor=Actor.for_request(request),
            reason=request.POST.get("reason", ""),
            request_id=request_id_of(request),
        )
    except DomainError as exc:
        messages.error(request, f"Not {'unlocked' if unlock else 'locked'}: {exc.message}")
    else:
        messages.success(request, f"Policy {policy.name} {'unlocked' if unlock else 'locked'}.")
    return redirect("retention:policy", pk=pk)
