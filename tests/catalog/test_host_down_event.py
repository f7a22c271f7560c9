"""Host down as a fleet event (issue 27, item 2): marked down through the real paths (the host page's form, the
API), the overview and the host page list the runs that lose their newest restorable checkpoint and by how much;
a move preview from the down host says plainly that its agent cannot upload. Trees read by the real agent."""

from __future__ import annotations

import pytest

from catalog.models import Checkpoint, Run
from catalog.recovery_model import runs_losing_newest
from fleet.models import Host
from promotion import moves
from tests.conftest import queries_for
from tests.helpers.recovery import NOW, SAVED_HOURS_AGO, report, save

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(recovery_clock, tmp_path, make_host, client, django_capture_on_commit_callbacks):
    """llm/titan: step 100 on gpu-a01 and gpu-b07, step 200 (the newest) on gpu-a01 only; 2 ranks."""
    a01, b07 = tmp_path / "gpu-a01", tmp_path / "gpu-b07"
    save(a01, 100)
    save(b07, 100)
    save(a01, 200)
    report(client, make_host, "gpu-a01", a01, django_capture_on_commit_callbacks)
    report(client, make_host, "gpu-b07", b07, django_capture_on_commit_callbacks)
    return Run.objects.get(name="titan")


def test_the_overview_and_the_host_page_list_the_runs_a_down_host_costs(fleet, signed_in_as):
    operator = signed_in_as("operator")
    a01, b07 = Host.objects.get(name="gpu-a01"), Host.objects.get(name="gpu-b07")
    assert "host-down-losses" not in operator.get("/").content.decode()
    quiet = queries_for(operator, "/")
    # Marked down on its host page, as an operator does.
    answer = operator.post(f"/fleet/hosts/{a01.pk}/state/", {"do": "down", "reason": "PSU failure INC-12"})
    assert answer.status_code == 302 and Host.objects.get(pk=a01.pk).down_since == NOW
    [loss] = runs_losing_newest(Run.objects.all())
    assert loss.point.if_up.checkpoint.step == 200 and loss.point.checkpoint.step == 100
    assert [h.name for h in loss.hosts] == ["gpu-a01"]
    hours = SAVED_HOURS_AGO[100] - SAVED_HOURS_AGO[200]
    assert (loss.point.down_steps, loss.point.down_hours, loss.point.down_gpu_hours) == (100, hours, 2 * hours)
    for url in ("/", f"/fleet/hosts/{a01.pk}/"):
        page = operator.get(url).content.decode()
        section = page[page.index('id="host-down-losses"') :]
        section = section[: section.index("</section>")]
        assert "1 run loses its newest restorable checkpoint" in section
        assert "llm/titan" in section and "step 200" in section and "step 100" in section
        assert "100 steps" in section and f"{hours:.1f} h" in section and f"{2 * hours:g} GPU-h" in section
    # The run's own page names the checkpoint a restore now starts from, as the recovery page does.
    run_page = operator.get(f"/runs/{fleet.pk}/").content.decode()
    newest = run_page[run_page.index('id="newest-title"') :][:400]
    assert "step 100" in newest and "step 200" not in newest
    # The problems list has it, from the same model, with what fixes it.
    [row] = operator.get("/api/v1/problems/?kind=host_down").json()["results"]
    assert row["run_label"] == "llm/titan" and row["action_url"].endswith(f"/recovery/{fleet.pk}/")
    assert "held only on gpu-a01: a restore now starts from step 100 and loses 100 steps" in row["reasons"][0]
    # Another host's page does not list it: its copies are not what the run lost.
    assert "host-down-losses" not in operator.get(f"/fleet/hosts/{b07.pk}/").content.decode()
    # The overview's cost stays flat: the list is one model for the runs holding copies on down hosts.
    busy = queries_for(operator, "/")
    save_more = Run.objects.create(team=fleet.team, name="idle")  # a run with nothing on a down host adds nothing
    assert queries_for(operator, "/") == busy and busy - quiet < 15 and save_more.pk
    # Back up through the API: nothing is listed.
    assert operator.post(f"/api/v1/hosts/{a01.pk}/up/", {"reason": "PSU replaced"}, content_type="application/json")
    assert "host-down-losses" not in operator.get("/").content.decode()


def test_a_move_preview_from_a_down_host_says_its_agent_cannot_upload(fleet, signed_in_as, s3):
    operator = signed_in_as("operator")
    name = s3.bucket()
    cold = s3.register(name, name="cold")
    step_200 = Checkpoint.objects.get(run=fleet, step=200)
    plan = moves.move_plan(checkpoints=[step_200], target_location=cold.location, target_storage_class="STANDARD_IA")
    assert [line.waits_for for line in plan.lines] == [""] and plan.host_down_note == ""
    a01 = Host.objects.get(name="gpu-a01")
    operator.post(f"/api/v1/hosts/{a01.pk}/down/", {"reason": "PSU failure INC-12"}, content_type="application/json")
    plan = moves.move_plan(checkpoints=[step_200], target_location=cold.location, target_storage_class="STANDARD_IA")
    [line] = plan.lines
    assert "only gpu-a01's agent can upload these files" in line.waits_for and "INC-12" in line.waits_for
    assert plan.host_down_note.startswith("1 of these 1 checkpoints wait for a host that is down or silent")
    page = operator.get(
        f"/checkpoints/{step_200.pk}/move/", {"target": cold.location.pk, "storage_class": "STANDARD_IA"}
    ).content.decode()
    assert 'id="move-host-down"' in page and "only gpu-a01&#x27;s agent can upload these files" in page
