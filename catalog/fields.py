"""Form fields that pick catalog objects by name, so that nobody has to look up an id to fill a filter or a form."""

from __future__ import annotations

from django import forms
from django.db.models import QuerySet

from catalog.models import Run
from catalog.selectors import run_by_ref


class RunField(forms.CharField):
    """A run, typed as "team/run" (or its name alone when no other run has it, or its id, as links carry it).
    Cleans to the run's id; a name that matches no run is a form error that says how to write it."""

    default_error_messages = {
        "not_found": 'No run "%(value)s": write it as team/run (for example vision/vit-huge), or give its id.',
    }

    def __init__(self, *, runs: QuerySet[Run] | None = None, **kwargs) -> None:
        kwargs.setdefault("max_length", 320)
        kwargs.setdefault(
            "widget", forms.TextInput(attrs={"placeholder": "team/run", "autocomplete": "off", "size": 18})
        )
        super().__init__(**kwargs)
        self.runs = runs if runs is not None else Run.objects.all()

    def clean(self, value):
        text = super().clean(value)
        if not text:
            return None
        run = run_by_ref(text, self.runs)
        if run is None:
            raise forms.ValidationError(self.error_messages["not_found"], code="not_found", params={"value": text})
        return run.pk
