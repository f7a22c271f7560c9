"""Resume pointers, judged on real trees written by the frameworks (demo/make_trees.py) and reported by the real agent.

Each case breaks a pointer the way real outages did: DeepSpeed's ``latest`` behind and ahead, Megatron's tracker
behind, a Trainer's newest ``checkpoint-N`` partial, a missing pointer, a 10 MB file where the pointer should be.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from catalog import pointers
from catalog.models import Run
from catalog.pointers import PointerState, pointers_for_run, pointers_for_runs
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from fleet import agent
from fleet.services import gzip_lines
from tests.helpers.ingest import post

pytestmark = pytest.mark.django_db


@pytest.fixture
def ingest(tmp_path, make_host, client, django_capture_on_commit_callbacks, monkeypatch):
    """ingest(build) -> {run name: [pointers]}: ``build(root)`` lays out trees, the real agent reports them."""

    def go(build) -> dict[str, list]:
        root = tmp_path / "checkpoints"
        build(root)
        kit = make_host(root=str(root))
        lines = list(agent.inventory_lines(str(root) + "/", kit.host.name, started_at="2026-11-21T23:00:00Z"))
        with django_capture_on_commit_callbacks(execute=True):
            assert post(client, kit, gzip_lines(lines)).status_code == 202
        judged = {run.name: pointers_for_run(run) for run in Run.objects.all()}
        # The fleet-wide problems list judges many runs at once: it must say exactly the same of each.
        runs = list(Run.objects.all())
        batched = pointers_for_runs(runs)
        said = {name: [p.as_dict() for p in pointers] for name, pointers in judged.items()}
        assert {r.name: [p.as_dict() for p in batched[r.pk]] for r in runs} == said
        # Only each folder's newest copies are read first (FOLDER_WINDOW); a folder whose judgment needs an older
        # one is read whole. With a window of one or two copies, every case here takes that path, and says the same
        # as reading every copy.
        for window in (1, 2, 10**9):
            monkeypatch.setattr(pointers, "FOLDER_WINDOW", window)
            assert {r.name: [p.as_dict() for p in pointers_for_run(r)] for r in runs} == said, f"window {window}"
            assert {r.name: [p.as_dict() for p in pointers_for_runs(runs)[r.pk]] for r in runs} == said
        monkeypatch.undo()
        return judged

    return go


def deepspeed(root: Path, latest: str | None) -> Path:
    run = root / "speech" / "ds"
    shutil.copytree(TREES / "pfs/speech/ds-tiny", run)
    if latest is None:
        (run / "latest").unlink()
    else:
        (run / "latest").write_text(latest)
    return run


def test_deepspeed_latest_that_names_the_newest_complete_tag_is_ok(ingest):
    [p] = ingest(lambda root: deepspeed(root, "global_step200"))["ds"]
    assert p.state == PointerState.OK and p.framework == "deepspeed"
    assert p.content == "global_step200" and p.target.checkpoint.step == 200
    assert p.fix == "" and p.fix_command == ""


def test_deepspeed_latest_behind_a_tag_that_has_every_file(ingest):
    [p] = ingest(lambda root: deepspeed(root, "global_step100"))["ds"]
    assert p.state == PointerState.BEHIND
    assert p.target.checkpoint.step == 100
    assert "global_step200" in p.fix
    assert p.fix_command.startswith("printf '%s\\n' global_step200 > ") and p.fix_command.endswith("/speech/ds/latest")


def test_deepspeed_latest_ahead_naming_a_tag_that_is_not_there_is_dangling(ingest):
    [p] = ingest(lambda root: deepspeed(root, "global_step300"))["ds"]
    assert p.state == PointerState.DANGLING and p.content == "global_step300"
    assert p.newest.checkpoint.step == 200 and "global_step200" in p.fix_command


def test_deepspeed_latest_ahead_naming_a_partial_tag(ingest):
    def build(root):
        run = deepspeed(root, "global_step300")
        shutil.copytree(run / "global_step200", run / "global_step300")
        (run / "global_step300" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()

    [p] = ingest(build)["ds"]
    assert p.state == PointerState.BAD_TARGET and p.target.checkpoint.step == 300
    assert "partial" in p.detail and "global_step200" in p.fix_command


def test_a_missing_pointer_is_named_with_the_line_to_write(ingest):
    [p] = ingest(lambda root: deepspeed(root, None))["ds"]
    assert p.state == PointerState.MISSING and "loads nothing" in p.detail
    assert "global_step200" in p.fix_command and p.fix_command.startswith("printf")


def test_a_10_mb_file_in_place_of_the_pointer_is_unreadable_not_trusted(ingest):
    def build(root):
        run = deepspeed(root, "global_step200")
        (run / "latest").write_bytes(b"global_step200" + b" " * (10 * 1024 * 1024))

    [p] = ingest(build)["ds"]
    assert p.state == PointerState.UNREADABLE and "10,485,774 bytes" in p.detail


def test_megatron_tracker_behind(ingest):
    def build(root):
        run = root / "llm" / "gpt"
        shutil.copytree(TREES / "pfs/llm/gpt-megatron", run)
        (run / "latest_checkpointed_iteration.txt").write_text("200")

    [p] = ingest(build)["gpt"]
    assert p.framework == "megatron" and p.state == PointerState.BEHIND
    assert p.target.checkpoint.step == 200
    assert p.fix_command.startswith("printf '%s\\n' 300 > ")
    assert p.fix_command.endswith("/llm/gpt/latest_checkpointed_iteration.txt")


def test_trainer_newest_checkpoint_folder_partial(ingest):
    def build(root):
        run = root / "nlp" / "gpt2"
        shutil.copytree(TREES / "pfs/nlp/gpt2-tiny/checkpoint-100", run / "checkpoint-100")
        shutil.copytree(TREES / "pfs/nlp/gpt2-tiny/checkpoint-100", run / "checkpoint-200")
        shard = run / "checkpoint-200" / "model-00002-of-00002.safetensors"
        with shard.open("r+b") as fh:
            fh.truncate(shard.stat().st_size - 64)
        trainer_state = run / "checkpoint-200" / "trainer_state.json"
        trainer_state.write_text(trainer_state.read_text().replace('"global_step": 100', '"global_step": 200'))

    [p] = ingest(build)["gpt2"]
    assert p.framework == "hf_trainer" and p.state == PointerState.BAD_TARGET
    assert p.content == "checkpoint-200" and p.newest.checkpoint.step == 100
    assert p.fix_command.startswith("mv ") and "checkpoint-200.broken" in p.fix_command


def test_torchtitan_picks_the_newest_step_with_metadata(ingest):
    def build(root):
        run = root / "llm" / "titan"
        shutil.copytree(TREES / "nvme-a/llm/llama-tiny/step-100", run / "step-100")
        shutil.copytree(TREES / "nvme-a/llm/llama-tiny/step-100", run / "step-200")
        (run / "step-200" / "__1_0.distcp").unlink()

    [p] = ingest(build)["titan"]
    assert p.framework == "pytorch_dcp" and p.state == PointerState.BAD_TARGET
    assert p.target.checkpoint.step == 200 and p.newest.checkpoint.step == 100


def test_the_run_and_recovery_pages_and_the_recovery_api_show_the_pointer_and_its_fix(ingest, signed_in_as):
    ingest(lambda root: deepspeed(root, "global_step100"))
    run = Run.objects.get(name="ds")
    viewer = signed_in_as("viewer")
    for url in (f"/runs/{run.pk}/", f"/recovery/{run.pk}/"):
        page = viewer.get(url).content.decode()
        assert "Resume pointers" in page and "Points at an older checkpoint" in page, url
        assert "global_step200" in page and "printf" in page, url
    data = viewer.get(f"/api/v1/recovery/{run.pk}/").json()
    [p] = data["pointers"]
    assert p["state"] == "behind" and p["points_to"]["label"] == "step 100"
    assert p["newest_complete"] is not None and "global_step200" in p["fix_command"]


def test_the_resume_answer_names_the_checkpoint_the_copy_and_the_pointer_to_fix(ingest, signed_in_as):
    ingest(lambda root: deepspeed(root, None))  # `latest` lost: a restart would load nothing
    run = Run.objects.get(name="ds")
    viewer = signed_in_as("viewer")
    data = viewer.get(f"/api/v1/runs/{run.pk}/resume/").json()
    resume = data["resume"]
    assert resume["label"] == "step 200" and resume["path"].endswith("/speech/ds/global_step200")
    assert resume["commands"] and resume["commands"][0].startswith("rsync")
    assert resume["pointer"]["state"] == "missing" and "global_step200" in resume["pointer"]["fix_command"]
    assert resume["layout"]["reshard"] == "conversion"
    [rest] = data["ladder"]
    assert rest["label"] == "step 100" and rest["position"] == 2 and rest["steps_lost"] == 100
    ladder = viewer.get(f"/api/v1/runs/{run.pk}/ladder/").json()["ladder"]
    assert [r["position"] for r in ladder] == [1, 2]
    page = viewer.get(f"/recovery/{run.pk}/").content.decode()
    assert "The whole ladder" in page and "100 steps" in page
    assert viewer.get("/api/v1/runs/99999/resume/").status_code == 404


def test_a_ladder_lists_what_cannot_be_resumed_from_last_with_the_reason(ingest):
    def build(root):
        run = deepspeed(root, "global_step200")
        shutil.copytree(run / "global_step200", run / "global_step300")
        (run / "global_step300" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()

    ingest(build)
    from catalog.ladder import ladder_for

    ladder = ladder_for(Run.objects.get(name="ds"))
    assert [(r.checkpoint.step, r.position) for r in ladder] == [(200, 1), (100, 2), (300, None)]
    assert "no complete copy" in ladder[-1].why


def test_many_runs_are_judged_in_three_queries(ingest, django_assert_max_num_queries):
    def build(root):
        deepspeed(root, "global_step100")
        shutil.copytree(TREES / "pfs/llm/gpt-megatron", root / "llm" / "gpt")
        (root / "llm" / "gpt" / "latest_checkpointed_iteration.txt").write_text("200")

    ingest(build)
    runs = list(Run.objects.all())
    assert len(runs) == 2
    with django_assert_max_num_queries(3):
        judged = pointers_for_runs(runs)
    assert {p.state for pointers in judged.values() for p in pointers} == {PointerState.BEHIND}


def test_the_problems_list_shows_a_wrong_pointer_fleet_wide_with_its_fix(ingest, signed_in_as):
    def build(root):
        shutil.copytree(TREES / "pfs/llm/gpt-megatron", root / "llm" / "gpt")
        (root / "llm" / "gpt" / "latest_checkpointed_iteration.txt").write_text("200")
        deepspeed(root, "global_step200")  # names the newest complete tag: fine, not listed

    ingest(build)
    viewer = signed_in_as("viewer")
    page = viewer.get("/problems/?kind=pointer").content.decode()
    assert "Wrong resume pointer" in page and "llm/gpt" in page
    assert "latest_checkpointed_iteration.txt" in page and "printf" in page  # the line to run
    assert "speech/ds" not in page
    rows = viewer.get("/api/v1/problems/?kind=pointer").json()
    listed = rows["results"] if "results" in rows else rows["rows"]
    assert [r["kind"] for r in listed] == ["pointer"]
    export = b"".join(viewer.get("/problems/export.csv?kind=pointer").streaming_content).decode()
    assert "pointer" in export and "llm/gpt" in export
