"""Reshard compatibility from real trees written by the frameworks, reported by the real agent."""

from __future__ import annotations

import shutil

import pytest

from catalog.models import CheckpointCopy, Run, ShardFile
from catalog.reshard import Reshard, layout_of
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from fleet import agent
from fleet.services import gzip_lines
from tests.helpers.ingest import post

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet(tmp_path, make_host, client, django_capture_on_commit_callbacks):
    root = tmp_path / "checkpoints"
    shutil.copytree(TREES / "nvme-a/llm/llama-tiny/step-100", root / "llm/titan/step-100")
    shutil.copytree(TREES / "pfs/speech/ds-tiny", root / "speech/ds")
    shutil.copytree(TREES / "pfs/llm/gpt-megatron", root / "llm/gpt")
    shutil.copytree(TREES / "pfs/nlp/gpt2-tiny/checkpoint-100", root / "nlp/gpt2/checkpoint-100")
    kit = make_host(root=str(root))
    lines = list(agent.inventory_lines(str(root) + "/", kit.host.name, started_at="2026-11-21T23:00:00Z"))
    with django_capture_on_commit_callbacks(execute=True):
        assert post(client, kit, gzip_lines(lines)).status_code == 202
    return {
        (c.checkpoint.run.name, c.checkpoint.step): c for c in CheckpointCopy.objects.select_related("checkpoint__run")
    }


def test_each_format_says_what_it_was_saved_with_and_whether_it_reshards(fleet):
    dcp = layout_of(fleet[("titan", 100)])
    assert (dcp.world_size, dcp.reshard) == (2, Reshard.FREE)
    assert dcp.loads_on(48)[0] is True
    ds = layout_of(fleet[("ds", 200)])
    assert ds.reshard == Reshard.CONVERSION and ds.parts == {"model parallel": 1, "data parallel": 2}
    assert ds.world_size == 2 and ds.source == "the model states' recorded world sizes"
    assert ds.loads_on(2) == (True, "the same 2 ranks it was saved by")
    ok, why = ds.loads_on(1)
    assert not ok and "ds_to_universal.py" in why
    legacy = layout_of(fleet[("gpt", 200)])
    assert fleet[("gpt", 200)].format == "megatron" and legacy.reshard == Reshard.CONVERSION
    assert legacy.parts == {"tensor parallel": 2, "pipeline parallel": 1} and "convert.py" in legacy.tool
    assert legacy.source == "the parallel sizes its args record"
    dist = layout_of(fleet[("gpt", 300)])
    assert fleet[("gpt", 300)].format == "megatron_dist" and dist.reshard == Reshard.FREE and dist.world_size == 2
    assert layout_of(fleet[("gpt2", 100)]).reshard == Reshard.FREE


def test_a_legacy_megatron_save_missing_its_highest_rank_keeps_the_layout_its_args_record(fleet):
    # The same save without mp_rank_01 (what the layout of a partial copy is read from): still tensor-parallel 2.
    copy = fleet[("gpt", 200)]
    files = [
        (p, f) for p, f in ShardFile.objects.filter(copy=copy).values_list("path", "facts") if "mp_rank_01" not in p
    ]
    layout = layout_of(copy, files=[(p.removeprefix(copy.path + "/"), f) for p, f in files])
    assert layout.parts == {"tensor parallel": 2, "pipeline parallel": 1}
    without_args = [(p.removeprefix(copy.path + "/"), None) for p, _ in files]
    assert layout_of(copy, files=without_args).parts == {"tensor parallel": 1, "pipeline parallel": 1}
    assert layout_of(copy, files=without_args).source == "the mp_rank_XX_YYY folders"


def test_the_recovery_page_answers_for_the_gpus_left_and_refuses_nonsense(fleet, signed_in_as):
    run = Run.objects.get(name="ds")
    viewer = signed_in_as("viewer")
    page = viewer.get(f"/recovery/{run.pk}/?gpus=1").content.decode()
    assert "Same layout only, or convert first" in page and "Does not load on 1 GPU as it is" in page
    assert "ds_to_universal.py" in page
    assert "Loads on 2 GPUs" in viewer.get(f"/recovery/{run.pk}/?gpus=2").content.decode()
    assert "must be a whole number" in viewer.get(f"/recovery/{run.pk}/?gpus=-3").content.decode()
    data = viewer.get(f"/api/v1/recovery/{run.pk}/").json()
    assert data["copies"][0]["layout"]["reshard"] == "conversion"
    ckpt = fleet[("titan", 100)].checkpoint
    assert "Loads on any number of GPUs" in viewer.get(f"/checkpoints/{ckpt.pk}/").content.decode()
