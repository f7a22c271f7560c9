"""The OpenAPI examples of the approvals API (``approvals.api``): a list an operation, each example written once and
named by the views that show it (``ckptfleet.schema`` says why they live here)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

from ckptfleet.schema import recorded

CHANGE_APPROVE = [
    OpenApiExample(
        "Approved by a second person: applied",
        value=recorded("change_request_read", state="applied", decided_label="grace"),
        response_only=True,
    )
]
CHANGE_REJECT = [OpenApiExample("Reject", value={"reason": "keeps too little for the audit period"}, request_only=True)]
CHANGE_CANCEL = [OpenApiExample("Withdraw", value={"reason": "asked for the wrong team"}, request_only=True)]
