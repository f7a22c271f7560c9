"""The OpenAPI examples of the promotions API (``promotion.api``): a list an operation, each example written once
and named by the views that show it (``ckptfleet.schema`` says why they live here)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

PROMOTION = [
    OpenApiExample(
        "A restore from Deep Archive, a third done",
        value={
            "id": 9,
            "checkpoint": 42,
            "source_copy": 97,
            "source_location": "ckpt-archive-eu",
            "target_location": 3,
            "target_location_name": "ckpt-hot-eu",
            "target_storage_class": "STANDARD",
            "target_tier": "object_standard",
            "method": "restore",
            "state": "restoring",
            "in_place": False,
            "restore_days": 3,
            "restore_tier": "Standard",
            "reason": "resume training from step 4000",
            "requested_label": "ada",
            "requested_at": "2026-11-27T08:02:11Z",
            "started_at": "2026-11-27T08:02:15Z",
            "finished_at": None,
            "cancelled_label": "",
            "items_total": 9,
            "items_done": 3,
            "items_blocked": 0,
            "bytes_total": 15032385536,
            "bytes_done": 5010795178,
            "percent": 33,
            "error": "",
            "direction": "promote",
            "origin": "manual",
            "verified_at": None,
            "source_deletion": None,
            "source_outcome": "",
            "plan": {},
        },
        response_only=True,
    )
]
PROMOTION_ITEMS = [
    OpenApiExample(
        "One of its files",
        value={
            "path": "step-4000/model-00001-of-00004.safetensors",
            "source_key": "llm/llama-tiny/step-4000/model-00001-of-00004.safetensors",
            "target_key": "llm/llama-tiny/step-4000/model-00001-of-00004.safetensors",
            "size": 4999610368,
            "etag": '"b1946ac92492d2347c6235b4d2611184-596"',
            "version_id": "",
            "source_storage_class": "DEEP_ARCHIVE",
            "state": "done",
            "detail": "",
            "done_at": "2026-11-27T11:40:02Z",
            "sha256": "9f2c4e1b7a0d3c5e8f6a2b4d1c7e9a3f5b8d0c2e4a6f1b3d5c7e9a0b2d4f6a8c",
            "verified_at": "2026-11-27T11:40:09Z",
        },
        response_only=True,
    )
]
PROMOTION_CREATE = [
    OpenApiExample(
        "Restore a copy to a hot bucket",
        value={"checkpoint": 42, "target_location": 3, "reason": "resume training"},
        request_only=True,
    )
]
PROMOTION_PREVIEW = [
    OpenApiExample("What a promotion would do", value={"checkpoint": 42, "target_location": 3}, request_only=True)
]
PROMOTION_CANCEL = [OpenApiExample("Cancel", value={"reason": "the job resumed from another copy"}, request_only=True)]
MOVE_PREVIEW = [
    OpenApiExample(
        "Demote to Glacier IR",
        value={"checkpoints": [42], "target_location": 7, "target_storage_class": "GLACIER_IR"},
        request_only=True,
    )
]
MOVE_CREATE = [
    OpenApiExample(
        "Demote a run's older checkpoints",
        value={
            "run": 3,
            "older_than_days": 14,
            "target_location": 7,
            "target_storage_class": "GLACIER_IR",
            "reason": "the run ended",
        },
        request_only=True,
    )
]
