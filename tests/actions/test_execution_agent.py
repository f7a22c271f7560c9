"""Host files are deleted by the host's agent: a real directory tree, the agent over HTTP, the running app."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from actions import execution, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Checkpoint, CheckpointCopy, ShardFile
from fleet import agent

OPERATOR = Actor.command(label="tests: operator")
URL = "/api/v1/agent/deletions/"


def report(server: str, root: Path) -> None:
    assert agent.main(["--server", server, "--host", "gpu-a01", "--root", str(root), "--wait"]) == 0


def delete(server: str, root: Path) -> int:
    return agent.main(["--server", server, "--host", "gpu-a01", "--root", str(root), "--deletions"])


def running_deletion(step: int = 100) -> DeletionJob:
    """Schedule the deletion of a llama-tiny checkpoint, let its grace period end and start it."""
    job = services.schedule_deletion(
        checkpoint=Checkpoint.objects.get(run__name="llama-tiny", step=step), reason="superseded", actor=OPERATOR
    )
    DeletionJob.objects.filter(pk=job.pk).update(execute_after=timezone.now() - timedelta(seconds=1))
    assert execution.start_due()["started"] == [job.pk]
    job.refresh_from_db()
    assert job.state == DeletionState.RUNNING  # the worker left the host's files to the agent
    return job


def test_the_agent_deletes_exactly_the_scheduled_files(live_server, host_tree, capsys):
    kit, root = host_tree
    report(live_server.url, root)
    job = running_deletion(100)
    step = root / "llm" / "llama-tiny" / "step-100"
    assert sorted(p.name for p in step.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    changed = step / "__1_0.distcp"
    st = changed.stat()
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))  # written again since
    (step / "written-later.bin").write_bytes(b"not in the frozen list")
    capsys.readouterr()

    assert delete(live_server.url, root) == 0

    assert sorted(p.name for p in step.iterdir()) == ["__1_0.distcp", "written-later.bin"]
    assert (root / "llm" / "llama-tiny" / "step-200" / ".metadata").exists()
    out = capsys.readouterr()
    assert f"gpu-a01:{root}: 2 deleted, 1 skipped, 0 failed" in out.out
    assert "changed: modified since it was scheduled" in out.err
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert job.items_deleted == 2
    assert "1 skipped" in job.outcome
    # Proof of reclaim on a host: the agent's per-file report; the skipped file is not counted as reclaimed.
    deleted_bytes = sum(DeletionItem.objects.filter(job=job, state="deleted").values_list("size", flat=True))
    assert job.proof_state == "confirmed" and job.bytes_reclaimed == deleted_bytes < job.bytes_total
    items = dict(DeletionItem.objects.filter(job=job).values_list("path", "state"))
    assert items["llm/llama-tiny/step-100/__1_0.distcp"] == ItemState.SKIPPED
    files = dict(
        ShardFile.objects.filter(location=kit.location, path__contains="step-100/").values_list("path", "gone_at")
    )
    assert files["llm/llama-tiny/step-100/__1_0.distcp"] is None  # still there, changed
    assert files["llm/llama-tiny/step-100/__0_0.distcp"] is not None
    reports = AuditEvent.objects.filter(action="deletion.agent_report", after__deletion=job.pk)
    assert [(e.actor_kind, e.actor_label, e.source, e.after["deleted"]) for e in reports] == [
        ("host", "gpu-a01", "agent", 2)
    ]
    ends = AuditEvent.objects.filter(action__in=list(execution.TERMINAL_ACTIONS.values()), after__deletion=job.pk)
    assert ends.count() == 1
    # The copy is judged again from what remains, as after an inventory: one shard left of three.
    copy = CheckpointCopy.objects.get(location=kit.location, path="llm/llama-tiny/step-100")
    assert (copy.gone_at, copy.state, copy.file_count) == (None, "partial", 1)
    assert ".metadata is missing" in copy.reasons[0]

    assert delete(live_server.url, root) == 0  # nothing left to do: nothing else is touched
    assert sorted(p.name for p in step.iterdir()) == ["__1_0.distcp", "written-later.bin"]


def test_a_missing_file_is_skipped_and_marked_gone(live_server, host_tree):
    kit, root = host_tree
    report(live_server.url, root)
    job = running_deletion(100)
    (root / "llm" / "llama-tiny" / "step-100" / "__0_0.distcp").unlink()
    assert delete(live_server.url, root) == 0
    item = DeletionItem.objects.get(job=job, path="llm/llama-tiny/step-100/__0_0.distcp")
    assert (item.state, item.detail) == (ItemState.SKIPPED, "missing: no such file")
    assert ShardFile.objects.get(location=kit.location, path=item.path).gone_at is not None
    assert DeletionJob.objects.get(pk=job.pk).state == DeletionState.COMPLETED


def test_a_hold_placed_while_the_job_waits_for_the_agent_wins(live_server, host_tree):
    _kit, root = host_tree
    report(live_server.url, root)
    job = running_deletion(100)
    services.hold(run=job.checkpoint.run, checkpoint=job.checkpoint, reason="audit", case_ref="CASE-9", actor=OPERATOR)
    assert delete(live_server.url, root) == 0
    assert len(list((root / "llm" / "llama-tiny" / "step-100").iterdir())) == 3
    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED and "CASE-9" in job.outcome
    assert not DeletionItem.objects.filter(job=job).exclude(state=ItemState.PENDING).exists()


def test_a_token_of_another_host_is_refused(live_server, host_tree, make_host, client, tmp_path):
    kit, root = host_tree
    report(live_server.url, root)
    job = running_deletion(100)
    other = make_host("gpu-b02", str(tmp_path / "b02"))
    ids = list(DeletionItem.objects.filter(job=job).values_list("pk", flat=True))
    events = AuditEvent.objects.count()

    mine = client.get(URL, **kit.auth())
    assert sorted(i["id"] for i in mine.json()["items"]) == sorted(ids)
    theirs = client.get(URL, **other.auth())
    assert theirs.status_code == 200 and theirs.json() == {"host": "gpu-b02", "items": []}
    asked = client.get(URL, {"root": str(root)}, **other.auth())  # another host's root
    assert asked.status_code == 400 and "not a registered root of gpu-b02" in asked.json()["detail"]
    body = json.dumps({"results": [{"id": pk, "result": "deleted"} for pk in ids]})
    refused = client.post(URL, body, content_type="application/json", **other.auth())
    assert refused.status_code == 403
    assert "not files of host gpu-b02" in refused.json()["detail"]
    assert not DeletionItem.objects.filter(job=job).exclude(state=ItemState.PENDING).exists()
    assert AuditEvent.objects.count() == events
    assert client.get(URL).status_code in (401, 403)  # no token at all
    unknown = client.get(URL, {"root": "/somewhere/else"}, **kit.auth())
    assert unknown.status_code == 400 and "not a registered root of gpu-a01" in unknown.json()["detail"]


def test_a_malformed_report_changes_nothing(db, host_tree, client, tmp_path):
    kit, _root = host_tree
    for body in ({"results": []}, {"results": [{"id": "1", "result": "deleted"}]}, {"results": [{"id": 1}]}):
        answer = client.post(URL, json.dumps(body), content_type="application/json", **kit.auth())
        assert answer.status_code == 400, answer.content
        assert answer.json()["detail"]


def test_the_agent_deletes_one_regular_file_below_its_root_and_nothing_else(tmp_path):
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    (root / "run").mkdir(parents=True)
    outside.mkdir()
    target = outside / "shard.bin"
    target.write_bytes(b"precious")
    (root / "run" / "link").symlink_to(outside, target_is_directory=True)
    (root / "run" / "file-link").symlink_to(target)
    st = target.stat()
    size, mtime = st.st_size, st.st_mtime_ns / 1e9
    for rel in ("../outside/shard.bin", "/etc/passwd", "run/./x", "run//x", ""):
        assert delete_result(root, rel, size, mtime)[1].startswith("refused"), rel
    assert delete_result(root, "run/link/shard.bin", size, mtime) == (
        "skipped",
        "refused: link on its path is no longer a plain directory",
    )
    assert delete_result(root, "run/file-link", size, mtime) == ("skipped", "changed: no longer a regular file")
    assert delete_result(root, "run", size, mtime) == ("skipped", "changed: no longer a regular file")
    assert target.exists() and (root / "run" / "file-link").is_symlink()
    mine = root / "run" / "mine.bin"
    mine.write_bytes(b"12345")
    st = mine.stat()
    assert delete_result(root, "run/mine.bin", 4, st.st_mtime_ns / 1e9)[1].startswith("changed: its size")
    assert delete_result(root, "run/mine.bin", 5, st.st_mtime_ns / 1e9) == ("deleted", "")
    assert not mine.exists() and (root / "run").is_dir()
    assert delete_result(root, "run/mine.bin", 5, st.st_mtime_ns / 1e9) == ("skipped", "missing: no such file")


def delete_result(root: Path, rel: str, size: int, mtime: float) -> tuple[str, str]:
    return agent.delete_file(str(root), rel, size, mtime)
