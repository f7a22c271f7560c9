"""The OpenAPI schema: every operation has a summary and at least one example, and says how to get a token."""

from __future__ import annotations

import pytest
from django.conf import settings
from drf_spectacular.generators import SchemaGenerator

METHODS = ("get", "post", "put", "patch", "delete")

# Operations that still have no example, by operationId. The list may only shrink: an operation given an example
# must leave it (the last test fails otherwise), and a new operation without one fails the test naming it.
EXAMPLES_STILL_MISSING: frozenset[str] = frozenset(
    {
        "actions_bulk_create",
        "actions_deletions_approve_create",
        "actions_deletions_items_list",
        "actions_deletions_list",
        "actions_deletions_preview_retrieve",
        "actions_deletions_restore_create",
        "actions_deletions_retrieve",
        "actions_leases_list",
        "agent_deletions_create",
        "agent_deletions_retrieve",
        "agent_leases_list",
        "agent_offloads_create",
        "agent_offloads_retrieve",
        "agent_offloads_sign_create",
        "agent_promotions_create",
        "agent_promotions_retrieve",
        "audit_list",
        "audit_retrieve",
        "change_request_approve",
        "change_request_list",
        "change_request_read",
        "checkpoints_flagged_list",
        "checkpoints_list",
        "checkpoints_placement_retrieve",
        "checkpoints_retrieve",
        "hosts_down_create",
        "hosts_gpus_create",
        "hosts_list",
        "hosts_retrieve",
        "hosts_up_create",
        "inventories_create",
        "inventories_retrieve",
        "inventory_list_list",
        "inventory_list_retrieve",
        "jobs_retrieve",
        "locations_list",
        "locations_retrieve",
        "locations_scan_create",
        "locations_soft_delete_create",
        "orphans_list",
        "overview_retrieve",
        "promotions_items_list",
        "promotions_list",
        "promotions_retrieve",
        "recovery_points_retrieve",
        "recovery_retrieve",
        "retention_policy_dry_run",
        "retention_policy_list",
        "retention_policy_read",
        "retention_simulate",
        "retention_tiering",
        "runs_ladder_retrieve",
        "runs_lineage_retrieve",
        "runs_placement_retrieve",
        "runs_recovery_point_retrieve",
        "spend_price_points_create",
        "spend_price_points_list",
        "spend_summary",
        "spend_table",
        "tiering_policy_list",
        "tiering_policy_preview",
        "tiering_policy_read",
        "tiering_policy_run",
    }
)


@pytest.fixture(scope="module")
def operations():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {
        op["operationId"]: (method.upper(), path, op)
        for path, item in schema["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def _has_example(op: dict) -> bool:
    bodies = list(op.get("requestBody", {}).get("content", {}).values())
    bodies += [c for r in op.get("responses", {}).values() for c in r.get("content", {}).values()]
    return any(body.get("examples") or body.get("example") for body in bodies)


def test_every_operation_has_a_summary(operations):
    missing = [f"{m} {p} ({oid})" for oid, (m, p, op) in operations.items() if not op.get("summary", "").strip()]
    assert not missing, "operations without a summary:\n" + "\n".join(sorted(missing))


def test_every_operation_has_an_example(operations):
    missing = [
        f"{m} {p} ({oid})"
        for oid, (m, p, op) in operations.items()
        if oid not in EXAMPLES_STILL_MISSING and not _has_example(op)
    ]
    assert not missing, "operations without a request or response example:\n" + "\n".join(sorted(missing))


def test_the_list_of_operations_without_an_example_only_shrinks(operations):
    given = sorted(oid for oid in EXAMPLES_STILL_MISSING if oid in operations and _has_example(operations[oid][2]))
    gone = sorted(oid for oid in EXAMPLES_STILL_MISSING if oid not in operations)
    assert not given, f"these have an example now; take them off EXAMPLES_STILL_MISSING: {given}"
    assert not gone, f"no such operations any more; take them off EXAMPLES_STILL_MISSING: {gone}"


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
