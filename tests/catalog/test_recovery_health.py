"""Host health in recovery: a host marked down, or silent, drops its copies out of the restore ranking with the
reason shown, and every copy says how fresh its evidence is. Trees written by the frameworks, read by the real
agent on two hosts, uploaded through the inventory API."""

from __future__ import annotations

import shutil
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from audit.models import AuditEvent
from catalog.models import Run
from catalog.recovery_model import recovery_page
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from fleet import agent
from fleet.models import Host
from fleet.services import gzip_lines
from tests.helpers.ingest import post

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_hosts(tmp_path, make_host, client, django_capture_on_commit_callbacks):
    """llm/titan step-100 on gpu-a01 and on gpu-b07 (same bytes); step-200 only on gpu-a01."""
    kits = []
    for name, steps in (("gpu-a01", (100, 200)), ("gpu-b07", (100,))):
        root = tmp_path / name
        for step in steps:
            shutil.copytree(TREES / "nvme-a/llm/llama-tiny/step-100", root / f"llm/titan/step-{step}")
        kit = make_host(name=name, root=str(root))
        lines = list(agent.inventory_lines(str(root) + "/", kit.host.name, started_at="2026-11-21T23:00:00Z"))
        with django_capture_on_commit_callbacks(execute=True):
            assert post(client, kit, gzip_lines(lines)).status_code == 202
        kits.append(kit)
    return Run.objects.get(name="titan")


def test_a_host_marked_down_leaves_the_ranking_and_the_page_says_why(two_hosts, signed_in_as):
    run = two_hosts
    rec = recovery_page(run)
    assert rec.checkpoint.step == 200 and rec.best.copy.location.host.name == "gpu-a01"
    assert "agent last seen just now" in rec.best.evidence
    operator = signed_in_as("operator")
    a01 = Host.objects.get(name="gpu-a01")
    answer = operator.post(f"/recovery/{run.pk}/hosts/{a01.pk}/", {"do": "down", "reason": "node failure INC-7"})
    assert answer.status_code == 302
    [event] = AuditEvent.objects.filter(action="host.down")
    assert event.reason == "node failure INC-7" and event.target_label == "gpu-a01"
    rec = recovery_page(run)
    # The answer moves to the newest checkpoint with a reachable copy; step 200 is passed over with the reason.
    assert rec.checkpoint.step == 100 and rec.best.copy.location.host.name == "gpu-b07"
    assert {(r.copy.checkpoint.step, r.copy.location.host.name) for r in rec.unreachable} == {
        (100, "gpu-a01"),
        (200, "gpu-a01"),
    }
    assert "marked down" in rec.unreachable[0].unreachable and "INC-7" in rec.unreachable[0].unreachable
    [skipped] = rec.skipped
    assert skipped.kind == "unreachable" and "step 200" in skipped.why and "INC-7" in skipped.why
    page = operator.get(f"/recovery/{run.pk}/").content.decode()
    assert "not offered: the host is down or silent" in page and "Mark gpu-a01 up" in page
    data = operator.get(f"/api/v1/recovery/{run.pk}/").json()
    assert data["label"] == "step 100" and "marked down" in data["unreachable"][0]["unreachable"]
    # Up again through the API: ranked again.
    assert (
        operator.post(f"/api/v1/hosts/{a01.pk}/up/", {"reason": "fixed"}, content_type="application/json").status_code
        == 200
    )
    assert recovery_page(run).best.copy.location.host.name == "gpu-a01"


def test_a_silent_host_is_not_offered_and_a_viewer_cannot_mark_hosts(two_hosts, signed_in_as, settings):
    run = two_hosts
    Host.objects.filter(name="gpu-a01").update(last_seen_at=timezone.now() - timedelta(hours=3))
    rec = recovery_page(run)
    assert "has not reported for over 120 min" in rec.unreachable[0].unreachable
    viewer = signed_in_as("viewer")
    a01 = Host.objects.get(name="gpu-a01")
    viewer.post(f"/recovery/{run.pk}/hosts/{a01.pk}/", {"do": "down", "reason": "x"})
    assert Host.objects.get(pk=a01.pk).down_since is None
    assert (
        viewer.post(f"/api/v1/hosts/{a01.pk}/down/", {"reason": "x"}, content_type="application/json").status_code
        == 403
    )
    assert not AuditEvent.objects.filter(action="host.down").exists()


def test_marking_down_needs_a_reason_and_the_command_works(two_hosts):
    out = StringIO()
    with pytest.raises(CommandError, match="say why the host is down"):
        call_command("fleet_host", "down", "gpu-b07", "--reason", " ", stdout=out)
    assert Host.objects.get(name="gpu-b07").down_since is None
    call_command("fleet_host", "down", "gpu-b07", "--reason", "maintenance", stdout=out)
    assert "gpu-b07: down since" in out.getvalue()
    call_command("fleet_host", "up", "gpu-b07", stdout=out)
    assert Host.objects.get(name="gpu-b07").down_since is None
    assert [
        e.action
        for e in AuditEvent.objects.filter(target_type="host", action__in=["host.down", "host.up"]).order_by("id")
    ] == [
        "host.down",
        "host.up",
    ]
