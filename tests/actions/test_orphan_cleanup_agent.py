"""Orphans on a host are deleted by the host's own agent, through the same deletion path as checkpoint files: a real
directory tree, the agent's report, an orphan clean-up scheduled from it, and the agent over HTTP."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from actions import execution, orphans, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from catalog import selectors
from catalog.models import CheckpointCopy, ShardFile
from tests.actions.conftest import as_ui, make_person
from tests.actions.test_execution_agent import delete, report
from tests.helpers.deletion import OPERATOR


def started(job: DeletionJob) -> None:
    DeletionJob.objects.filter(pk=job.pk).update(execute_after=timezone.now() - timedelta(seconds=1))
    assert execution.start_due()["started"] == [job.pk]


def test_the_agent_deletes_the_stray_files_and_leaves_one_claimed_since(live_server, host_tree):
    _kit, root = host_tree
    scratch = root / "scratch"
    scratch.mkdir()
    for name, size in (("core.1", 700), ("core.2", 900), ("core.3", 300)):
        (scratch / name).write_bytes(b"c" * size)
    report(live_server.url, root)
    location_id = ShardFile.objects.get(path="scratch/core.1").location_id
    group = next(g for g in selectors.orphans(kind="unclaimed") if g.prefix == "scratch")
    assert (group.items, group.bytes) == (3, 1900)
    job = orphans.schedule_cleanup(
        kind="unclaimed", location=location_id, prefix="scratch", reason="core dumps", actor=OPERATOR
    )
    # A rescan gave core.3 to a checkpoint since scheduling.
    copy = CheckpointCopy.objects.filter(location_id=location_id).select_related("checkpoint").first()
    ShardFile.objects.filter(path="scratch/core.3").update(copy=copy)
    services.approve(job=job, actor=as_ui(make_person("april", "approver")))  # files no checkpoint recognises
    started(job)
    job.refresh_from_db()
    assert job.state == DeletionState.RUNNING  # the worker left the host's files to the agent

    assert delete(live_server.url, root) == 0

    assert sorted(p.name for p in scratch.iterdir()) == ["core.3"]
    assert (root / "llm" / "llama-tiny" / "step-100").exists()
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    states = dict(DeletionItem.objects.filter(job=job).values_list("path", "state"))
    assert states == {"scratch/core.1": "deleted", "scratch/core.2": "deleted", "scratch/core.3": "skipped"}
    claimed = DeletionItem.objects.get(job=job, path="scratch/core.3")
    assert claimed.detail.startswith(f"claimed by checkpoint {copy.checkpoint} since scheduling")
    assert ShardFile.objects.filter(path__in=["scratch/core.1", "scratch/core.2"], gone_at__isnull=False).count() == 2
    assert ItemState.SKIPPED == claimed.state
