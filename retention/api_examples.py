"""The OpenAPI examples of the retention API (``retention.api``, ``retention.api_tiering``): a list an operation,
each example written once and named by the views that show it (``ckptfleet.schema`` says why they live here)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

from ckptfleet.schema import recorded

# --- retention policies (retention.api) ---------------------------------------------------------------------

POLICY_CREATE = [
    OpenApiExample(
        "Keep the last 5 and every 1000th step",
        value={
            "name": "llm: last 5 + every 1000",
            "team": 2,
            "keep_last": 5,
            "keep_every": 1000,
            "keep_milestones": True,
            "keep_critical": True,
            "keep_stepless": True,
            "reason": "the llm team's standard",
        },
        request_only=True,
    )
]
POLICY = [
    OpenApiExample(
        "A team's policy, locked and binding",
        value={
            "id": 3,
            "name": "llm: last 5 + every 1000",
            "team": 2,
            "run": None,
            "keep_last": 5,
            "keep_every": 1000,
            "keep_milestones": True,
            "keep_critical": True,
            "keep_stepless": True,
            "enabled": True,
            "created_label": "ada",
            "created_at": "2026-10-02T09:14:00Z",
            "updated_at": "2026-10-02T09:14:00Z",
            "last_proposed_at": "2026-11-27T03:00:00Z",
            "last_proposed_count": 4,
            "locked_at": "2026-10-03T11:00:00Z",
            "locked_label": "ada",
            "lock_cooling_off_ends_at": "2026-10-10T11:00:00Z",
            "lock_state": "binding",
            "pending_changes": [],
        },
        response_only=True,
    )
]
POLICY_UPDATE = [
    OpenApiExample(
        "Keep fewer (waits for approval)", value={"keep_last": 3, "reason": "NVMe is full"}, request_only=True
    )
]
POLICY_LOCK = [OpenApiExample("Lock", value={"reason": "SOC 2 retention control"}, request_only=True)]
POLICY_UNLOCK = [OpenApiExample("Unlock", value={"reason": "locked the wrong policy"}, request_only=True)]
POLICY_DRY_RUN = [
    OpenApiExample(
        "What policy 3 would keep and propose now",
        value=recorded("retention_simulate", policy=3, enabled=True),
        response_only=True,
    )
]

# --- tiering policies (retention.api_tiering) ---------------------------------------------------------------

TIERING_POLICY_CREATE = [
    OpenApiExample(
        "Runs ended a week ago to Glacier Instant Retrieval",
        value={
            "name": "ended runs to GLACIER_IR",
            "team": 1,
            "action": "move",
            "target_location": 7,
            "target_storage_class": "GLACIER_IR",
            "run_ended_days": 7,
            "except_milestones": True,
            "every_hours": 24,
            "enabled": True,
            "reason": "finished runs do not need Standard",
        },
        request_only=True,
    )
]
TIERING_POLICY_UPDATE = [
    OpenApiExample("Run it daily", value={"every_hours": 24, "reason": "weekly was too slow"}, request_only=True)
]
TIERING_POLICY_RUN = [
    OpenApiExample("Run it now", value={"reason": "free NVMe on gpu-a01 before the next run starts"}, request_only=True)
]
