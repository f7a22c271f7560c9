"""The OpenAPI examples of the actions API (``actions.api``, ``actions.api_leases``, ``actions.views_bulk``): a
list an operation, each example written once and named by the views that show it (``ckptfleet.schema`` says why
they live here)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

from ckptfleet.schema import recorded

# --- pins ---------------------------------------------------------------------------------------------------

PIN = [
    OpenApiExample(
        "An active pin",
        value={
            "id": 5,
            "checkpoint": 42,
            "reason": "baseline for the paper",
            "pinned_label": "ada",
            "pinned_at": "2026-10-14T16:20:00Z",
            "unpinned_label": "",
            "unpinned_at": None,
            "active": True,
        },
        response_only=True,
    )
]
PIN_CREATE = [
    OpenApiExample("Pin a baseline", value={"checkpoint": 42, "reason": "baseline for the paper"}, request_only=True)
]
PIN_UNPIN = [OpenApiExample("Unpin", value={"reason": "the paper is published"}, request_only=True)]

# --- holds --------------------------------------------------------------------------------------------------

HOLD = [
    OpenApiExample(
        "A legal hold mirrored to Object Lock",
        value={
            "id": 3,
            "run": 7,
            "checkpoint": None,
            "mode": "legal",
            "retain_until": None,
            "releasable_after": None,
            "reason": "litigation hold",
            "case_ref": "LEGAL-12",
            "placed_label": "ada",
            "placed_at": "2026-11-02T10:00:00Z",
            "released_label": "",
            "released_at": None,
            "release_reason": "",
            "release_case_ref": "",
            "mirror_state": "done",
            "mirror_detail": "",
            "mirrored_at": "2026-11-02T10:04:31Z",
            "mirror_mode": "",
            "mirror_retain_until": None,
            "mirror_objects": 312,
            "mirror_refused": 0,
            "active": True,
        },
        response_only=True,
    )
]
HOLD_CREATE = [
    OpenApiExample(
        "A legal hold on a run",
        value={"run": 7, "reason": "litigation hold", "case_ref": "LEGAL-12", "mode": "legal"},
        request_only=True,
    ),
    OpenApiExample(
        "A compliance hold until a date",
        value={
            "run": 7,
            "checkpoint": 42,
            "reason": "regulator's preservation order",
            "case_ref": "SEC-2026-7",
            "mode": "compliance",
            "retain_until": "2027-06-30",
        },
        request_only=True,
    ),
]
HOLD_RELEASE = [OpenApiExample("Release", value={"reason": "case closed", "case_ref": "LEGAL-12"}, request_only=True)]
HOLD_EXTEND = [
    OpenApiExample("Extend", value={"retain_until": "2028-06-30", "reason": "appeal filed"}, request_only=True)
]

# --- deletions ----------------------------------------------------------------------------------------------

DELETION_CREATE = [
    OpenApiExample(
        "Schedule a deletion", value={"checkpoint": 42, "reason": "superseded by step 4000"}, request_only=True
    )
]
DELETION_APPROVE = [
    OpenApiExample(
        "Approved by a second person",
        value=recorded(
            "actions_deletions_retrieve",
            needs_approval=True,
            approval_reasons=["the newest verified checkpoint of its run"],
            approved_at="2026-11-27T10:05:00Z",
            approved_label="grace",
        ),
        response_only=True,
    )
]
DELETION_CANCEL = [OpenApiExample("Cancel", value={"reason": "still needed for the ablation"}, request_only=True)]
DELETION_RESTORE = [
    OpenApiExample(
        "Restore from the trash",
        value={"reason": "step 400 is the baseline of the ablation after all"},
        request_only=True,
    )
]

# --- orphan clean-up ----------------------------------------------------------------------------------------

ORPHAN_CLEANUP_PREVIEW = [
    OpenApiExample(
        "Files of no checkpoint under a prefix",
        value={"kind": "unclaimed", "location": 4, "prefix": "scratch"},
        request_only=True,
    )
]
ORPHAN_CLEANUP = [
    OpenApiExample(
        "Incomplete multipart uploads of a run",
        value={"kind": "multipart", "location": 4, "prefix": "llm/llama-7b", "reason": "abandoned uploads"},
        request_only=True,
    )
]

# --- leases (a person's and a host agent's) -----------------------------------------------------------------

LEASE = [
    OpenApiExample(
        "A live lease of a resuming job",
        value={
            "id": 17,
            "checkpoint": 42,
            "owner": "job-7",
            "purpose": "resuming",
            "taken_label": "ada",
            "taken_at": "2026-11-27T08:00:00Z",
            "renewed_at": "2026-11-27T08:55:00Z",
            "expires_at": "2026-11-27T09:55:00Z",
            "released_at": None,
            "released_label": "",
            "lapsed_at": None,
            "live": True,
        },
        response_only=True,
    )
]
_TAKE = {"checkpoint": 42, "owner": "llama3-70b-resume-7", "purpose": "resuming", "ttl_seconds": 3600}
LEASE_TAKE = [OpenApiExample("A job resuming from step 41000", value=_TAKE, request_only=True)]
LEASE_RENEW = [OpenApiExample("Another hour", value={"ttl_seconds": 3600}, request_only=True)]
LEASE_RELEASE = [OpenApiExample("Done", value={"reason": "evaluation finished"}, request_only=True)]
AGENT_LEASE_TAKE = [OpenApiExample("Resuming from a checkpoint", value=_TAKE, request_only=True)]

# --- bulk actions -------------------------------------------------------------------------------------------

BULK = [
    OpenApiExample(
        "Preview a legal hold on two checkpoints (confirm: true acts)",
        value={
            "action": "hold",
            "items": [{"checkpoint": 42}, {"checkpoint": 43}],
            "reason": "litigation hold",
            "case_ref": "LEGAL-12",
            "confirm": False,
        },
        request_only=True,
    ),
    OpenApiExample(
        "Delete one copy of a checkpoint",
        value={
            "action": "delete",
            "items": [{"checkpoint": 42, "copy": 97}],
            "reason": "superseded by newer steps",
            "confirm": True,
        },
        request_only=True,
    ),
]
