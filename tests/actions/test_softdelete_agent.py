"""Soft delete on hosts: the real agent moves files to the root's trash, restores them, and purges them later."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from actions import softdelete
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from audit.models import AuditEvent
from catalog.models import ShardFile
from fleet import agent
from tests.actions.test_execution_agent import delete, report, running_deletion
from tests.helpers.deletion import OPERATOR

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _week_of_trash(settings):
    settings.SOFT_DELETE_DAYS = 7


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_trash_then_restore_then_trash_again_and_purge(live_server, host_tree, capsys):
    kit, root = host_tree
    report(live_server.url, root)
    before = tree(root)
    job = running_deletion(100)
    assert delete(live_server.url, root) == 0
    trash = root / ".ckptfleet-trash" / str(job.pk) / "llm" / "llama-tiny" / "step-100"
    assert sorted(p.name for p in trash.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert not (root / "llm" / "llama-tiny" / "step-100").exists() or not any(
        (root / "llm" / "llama-tiny" / "step-100").iterdir()
    )
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED and "3 of 3 moved to the trash" in job.outcome, job.outcome
    assert "3 moved to the trash" in capsys.readouterr().out
    # The next inventory does not report the trash as files of the root.
    report(live_server.url, root)
    assert not ShardFile.objects.filter(location=kit.location, path__startswith=".ckptfleet-trash").exists()

    softdelete.restore(job=job, reason="resume from it", actor=OPERATOR)
    assert delete(live_server.url, root) == 0
    job.refresh_from_db()
    assert job.state == DeletionState.RESTORED and "3 of 3 restored" in job.outcome, job.outcome
    assert {k: v for k, v in tree(root).items() if not k.startswith(".ckptfleet-trash")} == before
    assert (
        ShardFile.objects.filter(location=kit.location, path__contains="step-100/", gone_at__isnull=True).count() == 3
    )
    assert AuditEvent.objects.filter(action="deletion.restore", after__deletion=job.pk).count() == 1

    # A second deletion of the same checkpoint, and its window ends: the agent purges exactly its files.
    again = running_deletion(100)
    assert delete(live_server.url, root) == 0
    past = timezone.now() - timedelta(seconds=1)
    DeletionItem.objects.filter(job=again).update(reclaim_after=past)
    DeletionJob.objects.filter(pk=again.pk).update(reclaim_after=past)
    assert delete(live_server.url, root) == 0
    assert set(DeletionItem.objects.filter(job=again).values_list("state", flat=True)) == {ItemState.DELETED}
    assert not [p for p in (root / ".ckptfleet-trash").rglob("*") if p.is_file()]
    assert (root / "llm" / "llama-tiny" / "step-200" / ".metadata").exists()


def test_an_older_agent_is_never_handed_files_it_would_delete(live_server, host_tree):
    kit, root = host_tree
    report(live_server.url, root)
    running_deletion(100)
    assert softdelete.agent_pending(host=kit.host, root=str(root), soft=False) == []
    listed = softdelete.agent_pending(host=kit.host, root=str(root), soft=True)
    assert {i["action"] for i in listed} == {"trash"} and len(listed) == 3
    assert all(i["trash_path"].startswith(agent.TRASH_DIR + "/") for i in listed)
