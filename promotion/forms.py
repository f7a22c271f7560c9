"""The form that asks for a promotion: which copy, where, which storage class, how to restore."""

from __future__ import annotations

from django import forms

from fleet.models import StorageLocation
from promotion.choices import RestoreTier
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
