"""The OpenAPI schema: every operation has a summary and at least one example, and says how to get a token."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from drf_spectacular.generators import SchemaGenerator

from ckptfleet.schema import has_example, recorded_examples

METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(scope="module")
def operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {
        op["operationId"]: (method.upper(), path, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def test_every_operation_has_a_summary(operations):
    missing = [f"{m} {p} ({oid})" for oid, (m, p, op) in operations.items() if not op.get("summary", "").strip()]
    assert not missing, "operations without a summary:\n" + "\n".join(sorted(missing))


def test_every_operation_has_an_example(operations):
    missing = [f"{m} {p} ({oid})" for oid, (m, p, op) in operations.items() if not has_example(op)]
    assert not missing, (
        "operations without a request or response example (a write: an OpenApiExample in its app's api_examples.py; "
        "a read: manage.py api_examples --write after manage.py seed_demo, or the same):\n" + "\n".join(sorted(missing))
    )


def _writes_an_example(path: Path) -> bool:
    calls = (node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call))
    return any(getattr(call.func, "id", getattr(call.func, "attr", "")) == "OpenApiExample" for call in calls)


def test_hand_written_examples_live_in_each_apps_api_examples_module():
    """A view module reads as a view: the examples are in ``<app>/api_examples.py`` (``ckptfleet.schema``)."""
    base = Path(settings.BASE_DIR)
    ours = [Path(app.path) for app in apps.get_app_configs() if Path(app.path).is_relative_to(base)]
    modules = {path for folder in [*ours, base / "ckptfleet"] for path in folder.rglob("*.py")}
    elsewhere = [str(p.relative_to(base)) for p in modules if p.name != "api_examples.py" and _writes_an_example(p)]
    assert not elsewhere, "OpenApiExample written outside an app's api_examples.py: " + ", ".join(sorted(elsewhere))
    assert any(p.name == "api_examples.py" and _writes_an_example(p) for p in modules)


def resolve(schema: dict, components: dict) -> dict:
    while "$ref" in schema:
        schema = components[schema["$ref"].rsplit("/", 1)[-1]]
    if "allOf" in schema:
        merged: dict = {"type": "object", "properties": {}, "required": []}
        for part in schema["allOf"]:
            part = resolve(part, components)
            merged["properties"].update(part.get("properties", {}))
            merged["required"] += part.get("required", [])
        return merged
    return schema


def mismatches(value, schema: dict, components: dict, *, sent: bool, where: str = "body") -> list[str]:
    """Where an example disagrees with its schema: keys that an object with declared properties does not declare
    (unless it takes additional ones), required keys left out (read-only ones in a request, write-only ones in
    an answer aside), an object or a list where the schema says otherwise."""
    schema = resolve(schema, components)
    if value is None or not schema:
        return []
    kind = schema.get("type")
    if kind == "array":
        if not isinstance(value, list):
            return [f"{where}: a list expected, got {type(value).__name__}"]
        item = schema.get("items", {})
        return [
            p for i, v in enumerate(value) for p in mismatches(v, item, components, sent=sent, where=f"{where}[{i}]")
        ]
    if kind != "object" or not schema.get("properties"):
        return []
    if not isinstance(value, dict):
        return [f"{where}: an object expected, got {type(value).__name__}"]
    declared = schema["properties"]
    problems = []
    unknown = sorted(set(value) - set(declared))
    if unknown and not schema.get("additionalProperties"):
        problems.append(f"{where}: {unknown} not declared")
    skip = "readOnly" if sent else "writeOnly"
    left_out = [
        k
        for k in schema.get("required", [])
        if k not in value and not resolve(declared.get(k, {}), components).get(skip)
    ]
    if left_out:
        problems.append(f"{where}: required {left_out} missing")
    for key, v in value.items():
        if key in declared:
            problems += mismatches(v, declared[key], components, sent=sent, where=f"{where}.{key}")
    return problems


def test_every_example_fits_its_schema(operations):
    """Hand-written and recorded, request and response: an example that the schema contradicts misleads more
    than none."""
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    problems = []
    for oid, (_, _, op) in sorted(operations.items()):
        bodies = [("request", True, m) for m in op.get("requestBody", {}).get("content", {}).values()]
        bodies += [(code, False, m) for code, r in op["responses"].items() for m in r.get("content", {}).values()]
        for code, sent, media in bodies:
            for name, example in media.get("examples", {}).items():
                found = mismatches(example.get("value"), media.get("schema", {}), components, sent=sent)
                problems += [f"{oid} {code} example {name!r}: {p}" for p in found]
    assert not problems, "examples that do not fit their operation's schema:\n" + "\n".join(problems)


def test_every_recorded_example_is_of_an_operation(operations):
    gone = sorted(set(recorded_examples()) - set(operations))
    assert not gone, f"recorded answers of no operation (regenerate: manage.py api_examples --write): {gone}"


def test_recorded_examples_hold_no_token_and_no_scratch_path():
    text = str(recorded_examples())
    assert recorded_examples(), "ckptfleet/api_examples.json is missing or empty"
    for word in ("cfu_", "cfh_", "X-Amz-Signature", "/tmp/"):
        assert word not in text, word


def test_the_description_says_how_to_get_and_send_a_token():
    description = settings.SPECTACULAR_SETTINGS["DESCRIPTION"]
    assert "/account/tokens/" in description
    assert "manage.py api_token create" in description
    assert "Authorization: Bearer" in description


def test_the_schema_page_lists_the_declared_parameters(operations):
    _, _, runs = operations["runs_list"]
    names = {p["name"] for p in runs["parameters"] if p["in"] == "query"}
    assert {"team", "status", "cursor", "page_size"} <= names
    _, _, offloads = operations["agent_offloads_retrieve"]
    assert {"root", "after", "dry_run", "defer"} <= {p["name"] for p in offloads["parameters"]}


def test_the_flagged_answer_declares_both_of_its_shapes(operations):
    """Without ``flag`` the answer is the list of flags and counts, with it a cursor page: the schema says both."""
    _, _, op = operations["checkpoints_flagged_list"]
    components = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]
    answer = resolve(op["responses"]["200"]["content"]["application/json"]["schema"], components)
    shapes = [resolve(s, components) for s in answer["oneOf"]]
    assert [s.get("type") for s in shapes] == ["array", "object"]
    assert set(resolve(shapes[0]["items"], components)["required"]) == {"flag", "label", "help", "count"}
    assert set(shapes[1]["properties"]) == {"next", "previous", "results"}
