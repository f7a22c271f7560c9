"""The Teams pages, under /spend/teams/: every team with its cost center and history; finance edits them.

Reading needs any role; creating, renaming and setting a cost center need the finance role (an admin has it),
checked by ``catalog.teams``, whose services every way in calls. A person scoped to some teams
(``access.scoping``) sees and edits those teams only.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import Http404
from django.shortcuts import redirect, render

from access.roles import Role, has_role
from access.scoping import restrict_teams
from audit.actor import Actor
from audit.choices import EventSource
from catalog import teams as team_services
from catalog.models import Team
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.pricebook import utc_today

_REASON = forms.CharField(
    required=False,
    max_length=team_services.MAX_REASON,
    widget=forms.Textarea(attrs={"rows": 2}),
    help_text="Why, for the audit trail: a reorganisation, a new budget.",
)


class TeamForm(forms.Form):
    # Lengths are checked by the service (one rule, one message), not by the browser's maxlength.
    name = forms.CharField(strip=False, help_text=f"At most {team_services.MAX_NAME} characters; no '/'.")
    cost_center = forms.CharField(required=False, strip=False, help_text="Optional: applies from the start.")
    reason = _REASON


class RenameForm(forms.Form):
    name = forms.CharField(label="New name", strip=False)
    reason = _REASON


class CostCenterForm(forms.Form):
    cost_center = forms.CharField(
        required=False, strip=False, help_text="Empty: no cost center from that day (its spend shows unassigned)."
    )
    effective_from = forms.DateField(
        label="From",
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="The first UTC day it applies to: today, or back to the first of this month; earlier months are "
        "closed.",
    )
    reason = _REASON


def _actor(request) -> Actor:
    return Actor.person(request.user, EventSource.UI)


def _refused(request, exc: PermissionRefused, where: str):
    messages.error(request, f"You may read the teams but not change them: {exc.message}.")
    return redirect(where)


@login_required
def team_list(request):
    can_edit = has_role(request.user, Role.FINANCE)
    form = TeamForm()
    if request.method == "POST":
        form = TeamForm(request.POST)
        if form.is_valid():
            d = form.cleaned_data
            try:
                team = team_services.team_create(
                    actor=_actor(request), name=d["name"], cost_center=d["cost_center"], reason=d["reason"]
                )
            except PermissionRefused as exc:
                return _refused(request, exc, "spend:teams")
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Team {team.name} created.")
                return redirect("spend:team", pk=team.pk)
    rows = list(
        restrict_teams(Team.objects.all(), request.user)
        .annotate(run_count=Count("runs", distinct=True), changes=Count("cost_centers", distinct=True))
        .order_by("name")
    )
    return render(
        request,
        "spend/teams.html",
        {"teams": rows, "form": form if can_edit else None, "can_edit": can_edit, "today": utc_today()},
    )


@login_required
def team_detail(request, pk: int):
    team = restrict_teams(Team.objects.all(), request.user).filter(pk=pk).first()
    if team is None:
        raise Http404("no such team")
    can_edit = has_role(request.user, Role.FINANCE)
    today = utc_today()
    rename = RenameForm(initial={"name": team.name})
    cost = CostCenterForm(initial={"effective_from": today, "cost_center": team.cost_center})
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "rename":
                rename = RenameForm(request.POST)
                if rename.is_valid():
                    try:
                        team_services.team_rename(
                            actor=_actor(request),
                            team_id=team.pk,
                            name=rename.cleaned_data["name"],
                            reason=rename.cleaned_data["reason"],
                        )
                    except PermissionRefused:
                        raise
                    except DomainError as exc:
                        rename.add_error(None, exc.message)
                    else:
                        messages.success(request, f"Renamed to {rename.cleaned_data['name'].strip()}.")
                        return redirect("spend:team", pk=team.pk)
            elif action == "cost_center":
                cost = CostCenterForm(request.POST)
                if cost.is_valid():
                    d = cost.cleaned_data
                    try:
                        change = team_services.team_set_cost_center(
                            actor=_actor(request),
                            team_id=team.pk,
                            cost_center=d["cost_center"],
                            effective_from=d["effective_from"],
                            reason=d["reason"],
                        )
                    except PermissionRefused:
                        raise
                    except DomainError as exc:
                        cost.add_error(None, exc.message)
                    else:
                        entry = change.entry
                        until = (
                            f" until {change.until:%Y-%m-%d}, when a later change takes over" if change.until else ""
                        )
                        messages.success(
                            request,
                            f"{team.name} is billed to {entry.cost_center or 'no cost center'} from "
                            f"{entry.effective_from:%Y-%m-%d}{until}. Earlier days keep the cost center they had.",
                        )
                        return redirect("spend:team", pk=team.pk)
            else:
                messages.error(request, "Nothing was changed: choose rename or set a cost center.")
                return redirect("spend:team", pk=team.pk)
        except PermissionRefused as exc:
            return _refused(request, exc, f"/spend/teams/{team.pk}/")
    return render(
        request,
        "spend/team.html",
        {
            "team": team,
            "history": team_services.history([team.pk]).get(team.pk, []),
            "since_ever": team_services.SINCE_EVER,
            "runs": team.runs.order_by("name").only("pk", "name", "status")[:50],
            "run_count": team.runs.count(),
            "can_edit": can_edit,
            "rename": rename,
            "cost": cost,
            "today": today,
            "first_day": team_services.first_allowed_day(today),
        },
    )
