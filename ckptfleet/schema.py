"""The API schema's operations: each has a summary, whether or not its view names one.

An explicit ``@extend_schema(summary=...)`` wins. Otherwise the summary is the first sentence of the docstring
of the view's method or action (what a reader of the code reads first), else, for the standard actions of a
viewset, what they do to the view's model ("List holds", "One hold"), else the first sentence of the view
class's docstring. ``tests/ckptfleet/test_api_schema.py`` fails naming any operation left without one.

Each operation has an example too: a write's is written by hand (``OpenApiExample``); a read without one
gets the answer recorded from the demo fleet (``api_examples.json``, written by ``manage.py api_examples --write``
after ``manage.py seed_demo``), attached by ``attach_recorded_examples`` (a ``POSTPROCESSING_HOOKS`` entry) as a
response example named ``recorded``.

The hand-written examples live in one module per app, ``<app>/api_examples.py``, beside the app's API and in
the same floor (``.importlinter``), never in a view module: a view reads as a view, and names the list it shows
(``@extend_schema(request=..., responses=..., examples=api_examples.PIN_CREATE)``). Each list is one operation's,
named after its view and action; an example that two operations show (a list and its detail) is one object,
written once. ``recorded(...)`` lets such a module reuse a recorded answer for a write that returns the same
object. ``tests/ckptfleet/test_api_schema.py`` fails naming a view module that writes an ``OpenApiExample``.
"""

from __future__ import annotations

import inspect
import json
import re
from functools import cache
from pathlib import Path

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


EXAMPLES_FILE = Path(__file__).with_name("api_examples.json")
RECORDED = "recorded"
METHODS = ("get", "post", "put", "patch", "delete")


@cache
def recorded_examples() -> dict[str, dict]:
    """{operation id: {"status", "path", "body"}} as ``manage.py api_examples --write`` recorded them."""
    return json.loads(EXAMPLES_FILE.read_text()) if EXAMPLES_FILE.exists() else {}


def recorded(operation_id: str, **changes) -> dict:
    """A copy of the body recorded for an operation, with some fields changed: the answer of a write that
    returns the same object as a read, for an ``OpenApiExample(response_only=True)`` in an app's
    ``api_examples.py``."""
    body = recorded_examples().get(operation_id, {}).get("body", {})
    return {**(body if isinstance(body, dict) else {}), **changes}


def has_example(op: dict, *, recorded: bool = True) -> bool:
    """Whether the operation has a request or response example (``recorded=False``: one not recorded here)."""
    bodies = list(op.get("requestBody", {}).get("content", {}).values())
    bodies += [c for r in op.get("responses", {}).values() for c in r.get("content", {}).values()]
    return any(
        body.get("example") is not None or any(recorded or name != RECORDED for name in body.get("examples", {}))
        for body in bodies
    )


def attach_recorded_examples(result, generator, request, public):
    """A POSTPROCESSING_HOOK: each operation without an example gets its recorded answer as one."""
    examples = recorded_examples()
    for item in result.get("paths", {}).values():
        for method, op in item.items():
            found = examples.get(op.get("operationId", "")) if method in METHODS else None
            if found is None or has_example(op):
                continue
            response = op.setdefault("responses", {}).setdefault(str(found["status"]), {"description": ""})
            media = response.setdefault("content", {}).setdefault("application/json", {})
            media.setdefault("examples", {})[RECORDED] = {
                "summary": "Recorded from the demo fleet",
                "description": f"`GET {found['path']}` on the seeded demo fleet (lists cut to two items).",
                "value": found["body"],
            }
    return result
