"""The OpenAPI schema: every operation has a summary and at least one example, and says how to get a token."""

from __future__ import annotations

import pytest
from django.conf import settings
from drf_spectacular.generators import SchemaGenerator

from ckptfleet.schema import RECORDED, has_example, recorded_examples

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
        "operations without a request or response example (a write: OpenApiExample on its view; a read: "
        "manage.py api_examples --write after manage.py seed_demo, or OpenApiExample):\n" + "\n".join(sorted(missing))
    )


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


def mismatches(value, schema: dict, components: dict, where: str = "body") -> list[str]:
    """Where a value disagrees with a schema: keys an object with declared properties does not declare (unless it
    takes additional ones), required keys left out, an object or list where the schema says otherwise."""
    schema = resolve(schema, components)
    if value is None or not schema:
        return []
    kind = schema.get("type")
    if kind == "array":
        if not isinstance(value, list):
            return [f"{where}: a list expected, got {type(value).__name__}"]
        return [
            p for i, v in enumerate(value) for p in mismatches(v, schema.get("items", {}), components, f"{where}[{i}]")
        ]
    if kind == "object" and schema.get("properties"):
        if not isinstance(value, dict):
            return [f"{where}: an object expected, got {type(value).__name__}"]
        declared = schema["properties"]
        problems = []
        if not schema.get("additionalProperties"):
            problems += [
                f"{where}: {sorted(set(value) - set(declared))} not declared" for _ in [1] if set(value) - set(declared)
            ]
        read = [k for k in schema.get("required", []) if k not in value and not declared.get(k, {}).get("writeOnly")]
        problems += [f"{where}: required {read} missing" for _ in [1] if read]
        for key, v in value.items():
            if key in declared:
                problems += mismatches(v, declared[key], components, f"{where}.{key}")
        return problems
    return []


def test_every_recorded_example_is_an_operations_answer_and_fits_its_schema(operations):
    schema = SchemaGenerator().get_schema(request=None, public=True)
    components = schema["components"]["schemas"]
    problems = []
    for oid, found in recorded_examples().items():
        if oid not in operations:
            problems.append(f"{oid}: no such operation any more (regenerate: manage.py api_examples --write)")
            continue
        _, _, op = operations[oid]
        media = op["responses"].get(str(found["status"]), {}).get("content", {}).get("application/json", {})
        if RECORDED not in media.get("examples", {}):
            continue  # the view has an explicit example now; the recorded one is not shown
        problems += [f"{oid}: {p}" for p in mismatches(found["body"], media.get("schema", {}), components)]
    assert not problems, "recorded examples that do not fit their operation's schema:\n" + "\n".join(problems)


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
