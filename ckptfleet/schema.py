"""The API schema's operations: each has a summary, whether or not its view names one.

An explicit ``@extend_schema(summary=...)`` wins. Otherwise the summary is the first sentence of the docstring
of the view's method or action (what a reader of the code reads first), else, for the standard actions of a
viewset, what they do to the view's model ("List holds", "One hold"), else the first sentence of the view
class's docstring. ``tests/ckptfleet/test_api_schema.py`` fails naming any operation left without one.
"""

from __future__ import annotations

import inspect
import re

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema

SUMMARY_MAX = 120
_STANDARD = {
    "list": "List {plural}",
    "retrieve": "One {name}",
    "create": "Create a {name}",
    "update": "Replace a {name}",
    "partial_update": "Change a {name}",
    "destroy": "Delete a {name}",
}


def first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring, on one line, without its full stop; "" for none."""
    text = " ".join(inspect.cleandoc(doc or "").split("\n\n", 1)[0].split())
    if not text:
        return ""
    match = re.match(r"(.+?[.:;])(\s|$)", text)
    sentence = (match.group(1) if match else text).rstrip(".:;")
    sentence = re.sub(r"``([^`]+)``", r"`\1`", sentence)
    return sentence if len(sentence) <= SUMMARY_MAX else sentence[: SUMMARY_MAX - 1].rstrip() + "…"


class AutoSchema(SpectacularAutoSchema):
    def get_summary(self) -> str | None:
        return super().get_summary() or self._method_summary() or self._standard_summary() or self._class_summary()

    def _handler(self):
        name = getattr(self.view, "action", None) or self.method.lower()
        return getattr(self.view, name, None), name

    def _method_summary(self) -> str:
        handler, _ = self._handler()
        if handler is None or getattr(handler, "__module__", "").startswith(("rest_framework", "django")):
            return ""
        return first_sentence(handler.__doc__)

    def _standard_summary(self) -> str:
        _, name = self._handler()
        if name not in _STANDARD:
            return ""
        model = getattr(getattr(self.view, "queryset", None), "model", None)
        if model is None:
            serializer = getattr(self.view, "serializer_class", None)
            model = getattr(getattr(serializer, "Meta", None), "model", None)
        if model is None:
            return ""
        meta = model._meta
        return _STANDARD[name].format(name=meta.verbose_name, plural=meta.verbose_name_plural)

    def _class_summary(self) -> str:
        return first_sentence(type(self.view).__doc__)
