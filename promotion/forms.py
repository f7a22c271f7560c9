"""The forms that ask for a promotion (which copy, where, which class, how to restore) and for a move."""

from __future__ import annotations

from django import forms

from catalog.choices import Importance
from fleet.models import StorageLocation
from promotion.choices import RestoreTier
from promotion.moves import MOVE_CLASSES
from promotion.services import MAX_RESTORE_DAYS

STORAGE_CLASSES = [
    ("", "Keep / restore only (in place) · STANDARD elsewhere"),
    ("STANDARD", "STANDARD"),
    ("INTELLIGENT_TIERING", "INTELLIGENT_TIERING"),
    ("STANDARD_IA", "STANDARD_IA"),
    ("ONEZONE_IA", "ONEZONE_IA"),
    ("GLACIER_IR", "GLACIER_IR"),
]


class PromotionForm(forms.Form):
    copy = forms.IntegerField(required=False, help_text="Empty: the best complete copy.")
    target = forms.ModelChoiceField(queryset=StorageLocation.objects.all(), label="Target location")
    storage_class = forms.ChoiceField(choices=STORAGE_CLASSES, required=False, label="Target storage class")
    restore_days = forms.IntegerField(min_value=1, max_value=MAX_RESTORE_DAYS, initial=7, required=False)
    restore_tier = forms.ChoiceField(choices=RestoreTier.choices, initial=RestoreTier.STANDARD, required=False)
    reason = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class MoveForm(forms.Form):
    """Where to move one checkpoint or a run's checkpoints (filtered by age and importance), and why."""

    target = forms.ModelChoiceField(queryset=StorageLocation.objects.filter(bucket__isnull=False), label="To bucket")
    storage_class = forms.ChoiceField(choices=[(c, c) for c in MOVE_CLASSES], label="Storage class")
    source = forms.ModelChoiceField(
        queryset=StorageLocation.objects.all(), required=False, label="From location", help_text="Empty: any."
    )
    older_than_days = forms.IntegerField(min_value=1, max_value=36500, required=False, label="Saved over (days) ago")
    importance = forms.MultipleChoiceField(choices=Importance.choices, required=False)
    reason = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))
