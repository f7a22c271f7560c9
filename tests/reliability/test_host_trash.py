"""The reliability scorecard, the host trash (issue 26, item 6): it records only what the server asked for.

The real agent moves a checkpoint's files to its root's trash over HTTP; then a host token claims what the
server never asked: "purged" for files whose recovery window is still open, and for files under a hold once
the window ended. Neither is believed: the items stay trashed and restorable, and the job's event names them.
And a purge the agent skipped because the file in the trash changed stays trashed and counted, with its
reason, and is not handed out again. Each prints its figure.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from actions import services, softdelete
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from audit.actor import Actor
from audit.models import AuditEvent
from tests.actions.test_execution_agent import URL, delete, report, running_deletion
from tests.helpers.deletion import OPERATOR
from tests.reliability.conftest import report as scorecard

pytestmark = pytest.mark.django_db(transaction=True)

OTHER = Actor.command(label="tests: another operator")


@pytest.fixture(autouse=True)
def _week_of_trash(settings):
    settings.SOFT_DELETE_DAYS = 7


def trashed_job(live_server, root) -> DeletionJob:
    report(live_server.url, root)
    job = running_deletion(100)
    assert delete(live_server.url, root) == 0
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED and "3 of 3 moved to the trash" in job.outcome, job.outcome
    return job


def claim(client, kit, results) -> dict:
    answer = client.post(URL, json.dumps({"results": results}), content_type="application/json", **kit.auth())
    assert answer.status_code == 200, answer.content
    return answer.json()


def end_window(job: DeletionJob) -> None:
    past = timezone.now() - timedelta(seconds=1)
    DeletionItem.objects.filter(job=job).update(reclaim_after=past)
    DeletionJob.objects.filter(pk=job.pk).update(reclaim_after=past)


def test_a_purge_the_server_did_not_ask_for_is_not_believed(live_server, host_tree, client):
    kit, root = host_tree
    job = trashed_job(live_server, root)
    items = list(DeletionItem.objects.filter(job=job).order_by("pk"))
    trash_files = {i.pk: root / i.trash_ref for i in items}
    assert all(p.is_file() for p in trash_files.values())

    # Inside the window: the host says it purged all three.
    claim(client, kit, [{"id": i.pk, "result": "purged"} for i in items])
    assert set(DeletionItem.objects.filter(job=job).values_list("state", flat=True)) == {ItemState.TRASHED}
    event = AuditEvent.objects.filter(after__deletion=job.pk, after__not_asked_count=3).get()
    assert {e["why"] for e in event.after["not_asked"]} == {"its recovery window has not ended"}
    [reclaim] = softdelete.pending_reclaim(job=job)
    assert reclaim.items == 3

    # The window ends under a hold: still not asked for, still not believed.
    end_window(job)
    hold = services.hold(
        run=job.checkpoint.run, checkpoint=job.checkpoint, reason="audit", case_ref="C-7", actor=OPERATOR
    )
    assert softdelete.agent_pending(host=kit.host, root=str(root), soft=True) == []
    claim(client, kit, [{"id": items[0].pk, "result": "purged"}])
    assert DeletionItem.objects.get(pk=items[0].pk).state == ItemState.TRASHED
    assert AuditEvent.objects.filter(after__deletion=job.pk, after__not_asked__0__why="a hold covers its checkpoint")

    # Restore still covers every file the host claimed to have purged.
    services.release(hold=hold, reason="audit over", actor=OTHER)
    DeletionItem.objects.filter(job=job).update(reclaim_after=timezone.now() + timedelta(days=1))
    softdelete.restore(job=job, reason="resume from it", actor=OPERATOR)
    assert delete(live_server.url, root) == 0
    job.refresh_from_db()
    assert job.state == DeletionState.RESTORED and "3 of 3 restored" in job.outcome, job.outcome
    scorecard("host purges claimed outside the window or under a hold", "4 of 4 not believed, 3 of 3 restored")


def test_a_purge_the_agent_skipped_stays_in_the_trash_and_counted(live_server, host_tree):
    kit, root = host_tree
    job = trashed_job(live_server, root)
    changed = DeletionItem.objects.filter(job=job).order_by("path").first()
    (root / changed.trash_ref).write_bytes(b"someone wrote into the trash")  # its size no longer matches
    end_window(job)

    assert delete(live_server.url, root) == 0  # the agent purges two and skips the changed one
    states = dict(DeletionItem.objects.filter(job=job).values_list("pk", "state"))
    assert states.pop(changed.pk) == ItemState.TRASHED
    assert set(states.values()) == {ItemState.DELETED}
    changed.refresh_from_db()
    assert changed.detail.startswith(softdelete.PURGE_SKIPPED) and "changed" in changed.detail, changed.detail
    assert (root / changed.trash_ref).is_file()
    [reclaim] = softdelete.pending_reclaim(job=job)
    assert reclaim.items == 1 and reclaim.bytes == changed.size
    # Not handed out again: the agent would skip it again every pass.
    assert softdelete.agent_pending(host=kit.host, root=str(root), soft=True) == []
    event = AuditEvent.objects.filter(after__deletion=job.pk, after__purge_skipped=1).get()
    assert event.after["purged"] == 2
    scorecard("host purge skipped (file changed in the trash)", "stays trashed, counted, with its reason")
