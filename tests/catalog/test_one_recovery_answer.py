"""One answer in an incident (issue 27, item 1): the recovery page (headline, cards, "Pin and hold"), both
recovery-point APIs, the recovery API, the resume answer and the ladder name the same checkpoint and the same loss,
whichever single input changes: a host marked down, a copy corrupt, a copy unverified, a framework pointer broken,
the newest save interrupted. Trees written as the frameworks write them, walked by the real agent (with content
checksums) on two hosts, uploaded through the inventory API; the clock is set."""

from __future__ import annotations

import shutil

import pytest

from audit.actor import Actor
from catalog.models import CheckpointCopy, Run
from catalog.recovery_model import GpuSource, recovery_point_of
from catalog.recovery_point import run_rpo_set
from catalog.reshard import layout_of
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from fleet.models import Host
from tests.helpers.recovery import NOW, SAVED_HOURS_AGO, answers, report, save

pytestmark = pytest.mark.django_db

SCENARIOS = {
    # input changed: (expected step, expected steps lost)
    "healthy": (200, 0),
    "host down": (100, 100),
    "copy corrupt": (100, 100),
    "copy unverified": (100, 100),
    "pointer broken": (200, 0),
    "newest save interrupted": (200, 100),
}


@pytest.fixture
def fleet(request, recovery_clock, tmp_path, make_host, client, django_capture_on_commit_callbacks):
    """llm/titan: step 100 on gpu-a01 and gpu-b07, step 200 on gpu-a01 only, every save with its sidecar; then the
    one input the scenario changes. Returns the run."""
    scenario = request.param
    a01, b07 = tmp_path / "gpu-a01", tmp_path / "gpu-b07"
    save(a01, 100)
    save(b07, 100)
    newest = save(a01, 200, sidecar=scenario != "copy unverified")
    if scenario == "copy corrupt":
        shard = newest / "__1_0.distcp"
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF  # same size, other bytes than the sidecar recorded at save time
        shard.write_bytes(bytes(data))
    if scenario == "newest save interrupted":
        (save(a01, 300) / "__1_0.distcp").unlink()  # rank 1 never wrote its file
    if scenario == "pointer broken":
        shutil.copytree(TREES / "pfs/speech/ds-tiny", a01 / "speech/ds")
        (a01 / "speech/ds/latest").write_text("global_step999")  # names a save that is not there
    report(client, make_host, "gpu-a01", a01, django_capture_on_commit_callbacks)
    report(client, make_host, "gpu-b07", b07, django_capture_on_commit_callbacks)
    if scenario == "host down":
        operator_client = request.getfixturevalue("signed_in_as")("operator", username="olga")
        a01_host = Host.objects.get(name="gpu-a01")
        answer = operator_client.post(
            f"/api/v1/hosts/{a01_host.pk}/down/", {"reason": "node failure INC-9"}, content_type="application/json"
        )
        assert answer.status_code == 200
    for run in Run.objects.all():  # every run over its objective, so that the fleet list shows it
        run_rpo_set(run=run, hours=0.01, actor=Actor.system("test"))
    return Run.objects.get(name="titan")


@pytest.mark.parametrize("fleet", list(SCENARIOS), indirect=True)
def test_every_surface_names_the_same_checkpoint_and_loss(fleet, signed_in_as, request):
    step, lost = SCENARIOS[request.node.callspec.params["fleet"]]
    viewer = signed_in_as("operator", username="oncall")
    for run in Run.objects.order_by("pk"):
        said = answers(viewer, run)
        assert len(set(said.values())) == 1, said
    said = answers(viewer, fleet)
    assert said.keys() >= {"page headline", "pin and hold", "recovery-point API", "recovery points API", "resume"}
    checkpoint, steps, gpu_hours = said["resume"]
    point = recovery_point_of(fleet)
    assert (point.checkpoint.pk, point.checkpoint.step, steps) == (checkpoint, step, lost)
    assert point.gpus == 2 and point.gpus_source == GpuSource.WORLD_SIZE
    assert gpu_hours == round(2 * SAVED_HOURS_AGO[step], 1)  # hours since its save x 2 GPUs, on every surface


@pytest.mark.parametrize("fleet", ["host down"], indirect=True)
def test_a_down_host_moves_every_answer_and_says_why(fleet, signed_in_as):
    viewer = signed_in_as("viewer")
    point = recovery_point_of(fleet)
    assert point.if_up is not None and point.if_up.checkpoint.step == 200
    assert (point.down_steps, point.down_hours, point.down_gpu_hours) == (100, 2.0, 4.0)
    [skipped] = point.excluded
    assert skipped.kind == "unreachable" and "gpu-a01 is marked down" in skipped.why and "INC-9" in skipped.why
    page = viewer.get(f"/recovery/{fleet.pk}/").content.decode()
    assert "A host that is down or silent costs this run 100 steps, 2.0 h and 4 GPU-h" in page
    resume = viewer.get(f"/api/v1/runs/{fleet.pk}/resume/").json()
    assert resume["resume"]["host"] == "gpu-b07" and resume["excluded"][0]["kind"] == "unreachable"


@pytest.mark.parametrize("fleet", ["host down"], indirect=True)
def test_when_every_copy_is_on_the_down_host_nothing_is_named_anywhere(fleet, signed_in_as):
    viewer = signed_in_as("operator", username="oncall")
    Host.objects.filter(name="gpu-b07").update(down_since=NOW, down_reason="rack power", down_label="olga")
    said = answers(viewer, fleet)
    assert len(set(said.values())) == 1 and said["resume"][:2] == (None, 200), said  # every step seen is lost
    page = viewer.get(f"/recovery/{fleet.pk}/").content.decode()
    assert "Nothing to restore" in page and 'name="checkpoint"' not in page  # no Pin and hold of a dead copy
    assert "Mark gpu-a01 up" in page


@pytest.mark.parametrize("fleet", ["newest save interrupted"], indirect=True)
def test_the_gpus_come_from_the_newest_complete_save_not_the_interrupted_one(fleet):
    """Step 300 lost rank 1's file: one rank file is there. The run trained on 2 ranks; its GPU-hours count 2."""
    point = recovery_point_of(fleet)
    assert point.highest_step == 300 and point.checkpoint.step == 200
    assert (point.gpus, point.gpus_source) == (2, GpuSource.WORLD_SIZE)
    interrupted = CheckpointCopy.objects.get(checkpoint__run=fleet, checkpoint__step=300)
    assert interrupted.state != "complete" and layout_of(interrupted).world_size == 1  # what main counted
