"""The OpenAPI examples of the spend API (``spend.api``, ``spend.api_teams``): a list an operation, each example
written once and named by the views that show it (``ckptfleet.schema`` says why they live here)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample

# --- the price book (spend.api) -----------------------------------------------------------------------------

PRICE_POINT_CREATE = [
    OpenApiExample(
        "A negotiated S3 Standard price from a date",
        value={
            "tier": "object_standard",
            "storage_class": "STANDARD",
            "price": "0.019500",
            "basis": "gib_month",
            "currency": "USD",
            "effective_from": "2027-01-01",
            "source": "AWS private pricing addendum, 2027 (contract CF-2291)",
        },
        request_only=True,
    )
]

# --- teams and their cost centers (spend.api_teams) ---------------------------------------------------------

TEAM_CREATE = [
    OpenApiExample(
        "A new team",
        value={"name": "speech", "cost_center": "CC-4410", "reason": "new speech group"},
        request_only=True,
    )
]
TEAM = [
    OpenApiExample(
        "A team and its cost centers",
        value={
            "id": 2,
            "name": "llm",
            "cost_center": "CC-1200",
            "history": [
                {
                    "cost_center": "CC-1200",
                    "effective_from": "2026-07-01",
                    "id": 4,
                    "set_by_label": "fiona",
                    "set_at": "2026-06-28T09:15:00Z",
                    "reason": "new budget",
                }
            ],
        },
        response_only=True,
    )
]
TEAM_RENAME = [
    OpenApiExample("Rename", value={"name": "speech-research", "reason": "reorganisation"}, request_only=True)
]
TEAM_SET_COST_CENTER = [
    OpenApiExample(
        "From the first of next month",
        value={"cost_center": "CC-2", "effective_from": "2026-12-01", "reason": "moved to the research budget"},
        request_only=True,
    )
]
