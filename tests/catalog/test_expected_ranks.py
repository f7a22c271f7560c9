"""A save that lost its highest-numbered rank, judged from the checkpoint's own records on every surface.

Without its last rank a save has no gap in its rank numbers: it looks like a complete smaller save, and the
framework's pointer naming it would be called OK. The committed Megatron-LM save (demo/make_trees.py: every
``model_optim_rng.pt`` holds the job's args, an argparse.Namespace, as Megatron pickles it) is copied, its highest
tensor-parallel rank removed, reported by the real agent, and judged partial by the run page, the checkpoint page,
the problems list and the API, with the tracker that names it flagged and its fix given.
"""

from __future__ import annotations

import pickle
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from catalog.choices import CopyState
from catalog.models import Checkpoint, Run
from catalog.pointers import PointerState, pointers_for_run
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from fleet import agent
from fleet.choices import InventoryStatus
from fleet.services import gzip_lines
from tests.helpers.ingest import post

pytestmark = pytest.mark.django_db

LEGACY = TREES / "pfs/llm/gpt-megatron/iter_0000200"
TRACKER = "latest_checkpointed_iteration.txt"


@pytest.fixture
def report(tmp_path, make_host, client, django_capture_on_commit_callbacks):
    """report(build) -> Run: ``build(run_dir)`` lays out one Megatron save dir; the real agent reports it."""

    def go(build) -> Run:
        root = tmp_path / "checkpoints"
        run_dir = root / "llm" / "gpt"
        run_dir.mkdir(parents=True)
        build(run_dir)
        kit = make_host(root=str(root))
        lines = list(agent.inventory_lines(str(root) + "/", kit.host.name, started_at="2026-11-21T23:00:00Z"))
        with django_capture_on_commit_callbacks(execute=True):
            assert post(client, kit, gzip_lines(lines)).status_code == 202
        return Run.objects.get(name="gpt")

    return go


def two_saves(run_dir: Path, *, drop_highest: bool) -> None:
    """iter_0000200 and iter_0000400, tensor-parallel 2 each, the tracker naming 400; 400 without mp_rank_01."""
    for iteration in (200, 400):
        shutil.copytree(LEGACY, run_dir / f"iter_{iteration:07d}")
    if drop_highest:
        shutil.rmtree(run_dir / "iter_0000400" / "mp_rank_01")
    (run_dir / TRACKER).write_text("400")


def copy_of(run: Run, step: int):
    return Checkpoint.objects.get(run=run, step=step).copies.get()


MISSING = (
    "mp_rank_01/model_optim_rng.pt is missing (mp_rank_00/model_optim_rng.pt records tensor_model_parallel_size 2, "
    "pipeline_model_parallel_size 1)"
)


def test_a_whole_save_and_its_tracker_are_ok(report):
    run = report(lambda d: two_saves(d, drop_highest=False))
    assert copy_of(run, 400).state == CopyState.COMPLETE
    [pointer] = pointers_for_run(run)
    assert pointer.state == PointerState.OK and pointer.target.checkpoint.step == 400


def test_a_save_missing_its_highest_rank_is_partial_and_the_tracker_naming_it_is_flagged_with_its_fix(report):
    run = report(lambda d: two_saves(d, drop_highest=True))
    copy = copy_of(run, 400)
    assert copy.state == CopyState.PARTIAL
    assert MISSING in copy.reasons
    assert copy_of(run, 200).state == CopyState.COMPLETE

    [pointer] = pointers_for_run(run)
    assert pointer.state == PointerState.BAD_TARGET
    assert pointer.target.checkpoint.step == 400 and pointer.newest.checkpoint.step == 200
    assert "mp_rank_01/model_optim_rng.pt is missing" in pointer.detail
    assert pointer.fix_command.startswith("printf '%s\\n' 200 > ")
    assert pointer.fix_command.endswith(f"/llm/gpt/{TRACKER}")


def test_every_surface_says_partial_and_points_back_at_the_newest_complete_save(report, signed_in_as):
    run = report(lambda d: two_saves(d, drop_highest=True))
    checkpoint = Checkpoint.objects.get(run=run, step=400)
    viewer = signed_in_as("viewer")

    run_page = viewer.get(f"/runs/{run.pk}/").content.decode()
    assert "Points at a broken checkpoint" in run_page and "printf" in run_page
    checkpoint_page = viewer.get(f"/checkpoints/{checkpoint.pk}/").content.decode()
    assert "Partial" in checkpoint_page and "mp_rank_01/model_optim_rng.pt is missing" in checkpoint_page

    problems = viewer.get("/problems/?kind=partial").content.decode()
    assert "Partial step 400" in " ".join(re.sub(r"<[^>]+>", " ", problems).split())
    assert MISSING in problems and "step 200" not in problems
    pointer_problems = viewer.get("/problems/?kind=pointer").content.decode()
    assert TRACKER in pointer_problems and "printf" in pointer_problems
    rows = viewer.get("/api/v1/problems/?kind=partial").json()
    listed = rows["results"] if "results" in rows else rows["rows"]
    assert [r["kind"] for r in listed] == ["partial"]

    [api_copy] = viewer.get(f"/api/v1/checkpoints/{checkpoint.pk}/").json()["copies"]
    assert api_copy["state"] == "partial" and MISSING in api_copy["reasons"]
    [api_pointer] = viewer.get(f"/api/v1/recovery/{run.pk}/").json()["pointers"]
    assert api_pointer["state"] == "bad_target" and api_pointer["newest_complete"]["label"] == "step 200"
    resume = viewer.get(f"/api/v1/runs/{run.pk}/resume/").json()["resume"]
    assert resume["label"] == "step 200"


def _zip_without_args(path: Path, iteration: int) -> None:
    """A whole torch.save-shaped zip whose saved dict has no args (as some converters write): nothing to read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"iteration": iteration, "checkpoint_version": 3.0}, 2))


def test_without_records_the_grid_is_inferred_said_so_and_a_tracker_behind_a_whole_save_is_still_behind(report):
    # iter_0000400 has every file the grid present asks for but no args: partial only because the tracker was not
    # moved on to it. The note that its rank grid is inferred must not hide that from the pointer's judgment.
    def build(run_dir: Path) -> None:
        shutil.copytree(LEGACY, run_dir / "iter_0000200")
        for rank in ("mp_rank_00", "mp_rank_01"):
            _zip_without_args(run_dir / "iter_0000400" / rank / "model_optim_rng.pt", 400)
        (run_dir / TRACKER).write_text("200")

    run = report(build)
    copy = copy_of(run, 400)
    assert copy.state == CopyState.PARTIAL
    assert any("rank grid (2) is inferred from the files present" in r for r in copy.reasons), copy.reasons
    [pointer] = pointers_for_run(run)
    assert pointer.state == PointerState.BEHIND and pointer.fix_command.startswith("printf '%s\\n' 400 > ")


@pytest.mark.services
def test_a_bucket_scan_reads_the_args_by_ranged_gets_and_flags_the_tracker_naming_the_partial_save(s3, scan_now):
    # The server's bucket scanner reads the same facts as the agent (fleet.agent.stream_facts over ranged GETs):
    # the save without its highest rank is partial there too, and the fix is the command for the bucket.
    name = s3.bucket()
    s3.upload_tree(name, "pfs")
    s3.client.delete_object(Bucket=name, Key="llm/gpt-megatron/iter_0000200/mp_rank_01/model_optim_rng.pt")
    s3.put(name, f"llm/gpt-megatron/{TRACKER}", b"200")
    bucket = s3.register(name)
    assert scan_now(bucket).status == InventoryStatus.APPLIED

    run = Run.objects.get(name="gpt-megatron")
    copy = Checkpoint.objects.get(run=run, step=200).copies.get()
    assert copy.state == CopyState.PARTIAL and MISSING in copy.reasons
    [pointer] = pointers_for_run(run)
    assert pointer.state == PointerState.BAD_TARGET and pointer.newest.checkpoint.step == 300
    assert pointer.fix_command == (f"printf '%s\\n' 300 | aws s3 cp - s3://{name}/llm/gpt-megatron/{TRACKER}")
