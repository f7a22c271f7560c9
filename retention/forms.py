"""Forms of the retention pages: the keep rules, the tiering move, and a policy."""

from __future__ import annotations

from django import forms

from access.scoping import restrict, restrict_teams
from catalog.fields import RunField
from catalog.models import Team
from fleet.choices import LocationKind, Tier
from fleet.models import StorageLocation
from retention.models import TieringAction
from retention.rules import KeepRules
from retention.tiering import TARGET_CLASSES

MAX_COUNT = 1_000_000_000_000


def _number() -> forms.TextInput:
    # A text box with a numeric keyboard: styled like every other field, validated as a whole number.
    return forms.TextInput(attrs={"inputmode": "numeric"})


def _team(**kwargs) -> forms.ModelChoiceField:
    return forms.ModelChoiceField(
        queryset=Team.objects.order_by("name"),
        required=False,
        error_messages={"invalid_choice": "That team was not found: choose one of the list."},
        **kwargs,
    )


class _TeamChoices(forms.Form):
    """A form whose team is one of those ``user`` may choose (``access.scoping.restrict_teams``): a scoped
    person is offered their own teams, and another team's id is not found, as if it did not exist."""

    def __init__(self, *args, user=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if user is not None:
            self.fields["team"].queryset = restrict_teams(self.fields["team"].queryset, user)
            run = self.fields.get("run")
            if isinstance(run, RunField):  # a run named by a scoped person: one of their teams' runs
                run.runs = restrict(run.runs, user)


class RulesForm(_TeamChoices):
    """The keep rules, read from the query string (a simulation changes nothing, so it is a GET)."""

    team = _team(empty_label="Every team", help_text="Whose runs.")
    run = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    keep_last = forms.IntegerField(
        label="Keep the last N",
        widget=_number(),
        min_value=0,
        max_value=MAX_COUNT,
        initial=5,
        help_text="Newest steps; 0: off.",
    )
    keep_every = forms.IntegerField(
        label="Keep every Mth step",
        widget=_number(),
        min_value=0,
        max_value=MAX_COUNT,
        initial=0,
        help_text="Steps that are a multiple of M, e.g. 10000; 0: off.",
    )
    keep_milestones = forms.BooleanField(label="Keep milestones", required=False, initial=True)
    keep_critical = forms.BooleanField(label="Keep critical checkpoints", required=False, initial=True)
    keep_stepless = forms.BooleanField(label="Keep step-less exports", required=False, initial=True)

    @classmethod
    def from_request(cls, request) -> RulesForm:
        """Bound when the rules were submitted; the defaults (as if submitted) on a first visit."""
        if "keep_last" in request.GET:
            return cls(request.GET, user=request.user)
        data = {name: field.initial for name, field in cls.base_fields.items() if field.initial is not None}
        data.update({k: request.GET[k] for k in ("team", "run") if request.GET.get(k)})
        return cls({k: v for k, v in data.items() if v is not False}, user=request.user)

    def rules(self) -> KeepRules:
        d = self.cleaned_data
        return KeepRules(
            keep_last=d["keep_last"],
            keep_every=d["keep_every"],
            keep_milestones=d["keep_milestones"],
            keep_critical=d["keep_critical"],
            keep_stepless=d["keep_stepless"],
        )


class MoveForm(_TeamChoices):
    team = _team(empty_label="Every team")
    run = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    from_tier = forms.ChoiceField(label="Move bytes on", choices=Tier.choices, initial=Tier.NVME)
    from_class = forms.CharField(
        label="Only storage class", required=False, max_length=32, help_text="Empty: every class of that tier."
    )
    to_class = forms.ChoiceField(
        label="To storage class", choices=[(c, c) for c in TARGET_CLASSES], initial="GLACIER_IR"
    )
    to_location = forms.ModelChoiceField(
        label="Priced as bucket",
        queryset=StorageLocation.objects.filter(kind=LocationKind.BUCKET).order_by("name"),
        required=False,
        empty_label="Any bucket (the price book's bucket prices)",
    )
    finished_only = forms.BooleanField(
        label="Ended runs only (finished, failed or abandoned)", required=False, initial=True
    )

    @classmethod
    def from_request(cls, request) -> MoveForm:
        if "to_class" in request.GET:
            return cls(request.GET, user=request.user)
        data = {name: field.initial for name, field in cls.base_fields.items() if field.initial is not None}
        data.update({k: request.GET[k] for k in ("team", "run") if request.GET.get(k)})
        if "run" in data:
            data["finished_only"] = False  # one run chosen by name: whatever its status
        return cls({k: v for k, v in data.items() if v is not False}, user=request.user)


class PolicyForm(forms.Form):
    name = forms.CharField(max_length=200)
    keep_last = forms.IntegerField(
        label="Keep the last N", widget=_number(), min_value=1, max_value=MAX_COUNT, initial=5
    )
    keep_every = forms.IntegerField(
        label="Keep every Mth step", widget=_number(), min_value=0, max_value=MAX_COUNT, initial=0
    )
    keep_milestones = forms.BooleanField(label="Keep milestones", required=False, initial=True)
    keep_critical = forms.BooleanField(label="Keep critical checkpoints", required=False, initial=True)
    keep_stepless = forms.BooleanField(label="Keep step-less exports", required=False, initial=True)
    enabled = forms.BooleanField(
        label="Enabled", required=False, help_text="Enabled policies propose deletions once a day, for approval."
    )
    reason = forms.CharField(required=False, max_length=500, help_text="Why, for the audit trail.")


class NewPolicyForm(_TeamChoices, PolicyForm):
    team = _team(empty_label="No team: one run's policy")
    run = RunField(required=False, help_text="A run as team/run (or its id), for a policy of one run.")
    field_order = ["name", "team", "run"]

    def clean(self):
        data = super().clean()
        if bool(data.get("team")) == bool(data.get("run")):
            raise forms.ValidationError("Choose a team or give a run, not both.")
        return data


class TieringPolicyForm(forms.Form):
    """A tiering policy's rule, schedule and whether it is enabled (``retention.tiering_policies``)."""

    name = forms.CharField(max_length=200)
    action = forms.ChoiceField(choices=TieringAction.choices, initial=TieringAction.MOVE)
    source_tier = forms.ChoiceField(
        label="Only copies on", choices=[("", "Any tier"), *Tier.choices], required=False, initial=""
    )
    target_location = forms.ModelChoiceField(
        label="Move to bucket",
        queryset=StorageLocation.objects.filter(kind=LocationKind.BUCKET).order_by("name"),
        required=False,
        empty_label="(none: freeing host copies)",
    )
    target_storage_class = forms.ChoiceField(
        label="In storage class",
        choices=[("", "The bucket's default"), *((c, c) for c in TARGET_CLASSES)],
        required=False,
        initial="GLACIER_IR",
    )
    run_ended_days = forms.IntegerField(
        label="Runs ended at least N days ago",
        required=False,
        min_value=0,
        max_value=3650,
        widget=_number(),
        help_text="Empty: runs in any status.",
    )
    min_age_hours = forms.IntegerField(
        label="Copies older than N hours", min_value=0, max_value=24 * 3650, initial=0, widget=_number()
    )
    except_milestones = forms.BooleanField(label="Leave milestones", required=False, initial=True)
    except_critical = forms.BooleanField(label="Leave critical checkpoints", required=False, initial=True)
    every_hours = forms.IntegerField(
        label="Run every N hours", min_value=1, max_value=24 * 31, initial=24, widget=_number()
    )
    enabled = forms.BooleanField(
        label="Enabled", required=False, help_text="Enabling waits for a second person with the approver role."
    )
    reason = forms.CharField(required=False, max_length=500, help_text="Why, for the audit trail.")


class NewTieringPolicyForm(_TeamChoices, TieringPolicyForm):
    team = _team(empty_label="Every team")
    run = RunField(required=False, help_text="A run as team/run (or its id), for a policy of one run.")
    field_order = ["name", "team", "run"]

    def clean(self):
        data = super().clean()
        if data.get("team") and data.get("run"):
            raise forms.ValidationError("Choose a team or give a run, not both.")
        return data
