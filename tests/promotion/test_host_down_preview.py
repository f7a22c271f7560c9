"""A promotion onto a host that is marked down needs that host's agent to pull the files: its preview says so
plainly, first (issue 27, item 2). Marked down through the API, as an operator does."""

from __future__ import annotations

import pytest

from fleet.models import Host, StorageLocation
from promotion.choices import Method
from promotion.services import promotion_plan

pytestmark = pytest.mark.services


def test_a_promotion_onto_a_down_host_says_its_agent_cannot_pull(kit, make_host, signed_in_as):
    host = make_host("gpu-a01")
    _checkpoint, copy = kit.checkpoint(400, {"a": (b"a" * 300, "STANDARD")})
    plan = promotion_plan(copy=copy, target_location=host.location)
    assert plan.method == Method.AGENT_PULL and not any("Host down" in n for n in plan.notes)
    operator = signed_in_as("operator", username="olga-ops")
    gpu = Host.objects.get(name="gpu-a01")
    answer = operator.post(f"/api/v1/hosts/{gpu.pk}/down/", {"reason": "PSU INC-12"}, content_type="application/json")
    assert answer.status_code == 200
    plan = promotion_plan(copy=copy, target_location=StorageLocation.objects.get(pk=host.location.pk))
    assert plan.notes[0].startswith("Host down: only gpu-a01's agent can pull these files, and host gpu-a01 is marked")
    assert "PSU INC-12" in plan.notes[0] and "nothing is copied, until the host reports again" in plan.notes[0]
