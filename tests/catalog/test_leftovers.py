"""Left-overs of interrupted saves are orphans, never checkpoints: no list or count of checkpoints has them.

The trees are real layouts on disk, read by the real agent and ingested through the inventory API: an Orbax
step folder never renamed from ``*.orbax-checkpoint-tmp-*``, a Lightning ``.ckpt.XXXX.tmp`` never renamed, and a
DCP save whose coordinator died with ``.metadata.tmp`` beside the shards. Each run also has one finished save
of an older step, which is what every list must show as its newest.
"""

from __future__ import annotations

import shutil

import pytest

from catalog import recovery, selectors
from catalog.models import CheckpointCopy, Run
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from dashboard.run_filters import RunFilters
from fleet import agent
from fleet.services import gzip_lines
from tests.helpers.ingest import post

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet_with_leftovers(tmp_path, make_host, client, django_capture_on_commit_callbacks):
    """Saves written by the frameworks themselves (demo/make_trees.py), each beside the left-over
    of a later save that died before it was renamed into place."""
    root = tmp_path / "checkpoints"
    # Orbax: the later step still under the name Orbax writes it to before it renames it when finalised.
    vit = root / "vision" / "vit"
    shutil.copytree(TREES / "bucket/vision/vit-jax/400", vit / "100")
    shutil.copytree(TREES / "bucket/vision/vit-jax/500", vit / "200.orbax-checkpoint-tmp-1763700500")
    # Lightning: the later .ckpt still under its temporary name.
    lit = root / "vision" / "lit"
    lit.mkdir(parents=True)
    shutil.copy(TREES / "nvme-a/vision/resnet-tiny/epoch=0-step=100.ckpt", lit)
    shutil.copy(TREES / "nvme-a/vision/resnet-tiny/epoch=1-step=200.ckpt", lit / "epoch=1-step=200.ckpt.3f9a2c.tmp")
    # DCP: the later save's shards are written, its coordinator died before renaming .metadata.tmp.
    titan = root / "llm" / "titan"
    shutil.copytree(TREES / "nvme-a/llm/llama-tiny/step-100", titan / "step-100")
    shutil.copytree(TREES / "nvme-a/llm/llama-tiny/step-100", titan / "step-200")
    (titan / "step-200" / ".metadata").rename(titan / "step-200" / ".metadata.tmp")

    kit = make_host(root=str(root))
    lines = list(agent.inventory_lines(str(root) + "/", kit.host.name, started_at="2026-11-21T23:00:00Z"))
    with django_capture_on_commit_callbacks(execute=True):
        assert post(client, kit, gzip_lines(lines)).status_code == 202
    return kit


def test_the_ingest_recognises_each_left_over_as_a_temporary_copy_of_the_step_it_was_saving(fleet_with_leftovers):
    copies = {
        (c.checkpoint.run.name, c.checkpoint.step): c for c in CheckpointCopy.objects.select_related("checkpoint__run")
    }
    assert {key: (c.state, c.temporary) for key, c in copies.items()} == {
        ("lit", 100): ("complete", False),
        ("lit", 200): ("partial", True),
        ("titan", 100): ("complete", False),
        ("titan", 200): ("partial", True),
        ("vit", 100): ("complete", False),
        ("vit", 200): ("partial", True),
    }


def test_the_runs_list_counts_only_the_finished_saves(fleet_with_leftovers, signed_in):
    for run in RunFilters.from_params({}).apply():
        assert (run.name, run.checkpoint_count, run.copy_count, run.newest_step, run.bad_copies) == (
            run.name,
            1,
            1,
            100,
            0,
        )
    data = signed_in.get("/api/v1/runs/").json()["results"]
    assert {(r["name"], r["checkpoint_count"], r["copy_count"], r["newest_step"]) for r in data} == {
        ("lit", 1, 1, 100),
        ("titan", 1, 1, 100),
        ("vit", 1, 1, 100),
    }
    # A left-over is partial, but it is the orphans page's business, not a run needing attention.
    assert list(RunFilters.from_params({"attention": "1"}).apply()) == []
    page = RunFilters.from_params({"sort": "newest"}).page(Run.objects.all())
    assert [r.newest_step for r in page.runs] == [100, 100, 100]
    response = signed_in.get("/runs/")
    assert [(r.checkpoint_count, r.newest_step) for r in response.context["runs"]] == [(1, 100)] * 3


def test_the_run_page_and_its_timeline_show_no_left_over(fleet_with_leftovers, signed_in):
    for run in Run.objects.all():
        assert [c.step for c in selectors.run_checkpoints(run)] == [100]
        newest, _ = recovery.newest_restorable(run)
        assert newest is not None and newest.step == 100
        response = signed_in.get(f"/runs/{run.pk}/")
        assert response.status_code == 200
        assert [row.checkpoint.step for row in response.context["timeline"]["rows"]] == [100]


def test_the_checkpoints_api_lists_no_checkpoint_that_is_only_a_left_over(fleet_with_leftovers, signed_in):
    data = signed_in.get("/api/v1/checkpoints/", {"page_size": 100}).json()
    results = data["results"] if isinstance(data, dict) else data
    assert sorted((c["run"], c["step"]) for c in results) == [("lit", 100), ("titan", 100), ("vit", 100)]
    assert all(not copy["temporary"] for c in results for copy in c["copies"])
    for run in Run.objects.all():
        rows = signed_in.get(f"/api/v1/runs/{run.pk}/placement/").json()["rows"]
        assert [row["step"] for row in rows] == [100], rows


def test_the_left_overs_stay_listed_as_orphans(fleet_with_leftovers, signed_in):
    groups = selectors.orphans(kind=selectors.OrphanKind.TEMPORARY)
    assert sum(g.items for g in groups) == 3
    orphans = signed_in.get("/api/v1/orphans/", {"kind": "temporary"}).json()["results"]
    assert sum(g["items"] for g in orphans) == 3


def test_the_overview_queues_of_broken_copies_leave_the_left_overs_to_the_orphans_page(fleet_with_leftovers, signed_in):
    body = signed_in.get("/api/v1/overview/").json()
    text = str(body)
    assert CheckpointCopy.objects.filter(temporary=True).count() == 3
    html = signed_in.get("/queue/copies/?kind=partial").content.decode()
    assert "orbax-checkpoint-tmp" not in html and ".ckpt.3f9a2c.tmp" not in html and "titan" not in html
    assert "orbax-checkpoint-tmp" not in text
