"""The sidecar's ``status`` through the real path: a job writes ``ckptfleet.json``, the real agent walks the
host's root and uploads to the running app, the ingest sets the run's status (or refuses it, with a reason)."""

from __future__ import annotations

import json
from pathlib import Path

from audit.models import AuditEvent
from catalog.models import CheckpointCopy, Run
from fleet import agent
from fleet.choices import InventoryStatus
from fleet.models import Inventory


def write_sidecar(step_dir: Path, **fields) -> None:
    """What a training job writes after its last save: every file of the checkpoint, and how the run ended."""
    files = [
        {"path": p.relative_to(step_dir).as_posix(), "size": p.stat().st_size}
        for p in sorted(step_dir.rglob("*"))
        if p.is_file() and p.name != "ckptfleet.json"
    ]
    (step_dir / "ckptfleet.json").write_text(json.dumps({"schema": "ckptfleet/1", "files": files, **fields}))


def run_agent(server: str, root: Path) -> None:
    assert agent.main(["--server", server, "--host", "gpu-a01", "--root", str(root), "--wait"]) == 0
    inventory = Inventory.objects.order_by("-pk").first()
    assert inventory.status == InventoryStatus.APPLIED, inventory.error


def test_the_jobs_sidecar_marks_its_run_finished(live_server, host_tree):
    _kit, root = host_tree
    run_agent(live_server.url, root)
    assert Run.objects.get(name="llama-tiny").status == "active"
    write_sidecar(root / "llm" / "llama-tiny" / "step-200", status="finished", status_reason="reached step 200")
    run_agent(live_server.url, root)
    run = Run.objects.get(name="llama-tiny")
    assert (run.status, run.status_source, run.status_reason, run.status_by_label) == (
        "finished",
        "sidecar",
        "reached step 200",
        "gpu-a01",
    )
    event = AuditEvent.objects.get(action="run.status", target_id=run.pk)
    assert (event.actor_kind, event.source, event.after["source"]) == ("host", "agent", "sidecar")
    copy = CheckpointCopy.objects.get(checkpoint__run=run, checkpoint__step=200, gone_at__isnull=True)
    assert copy.state == "complete", copy.reasons
    run_agent(live_server.url, root)  # the same tree again: nothing new to say
    assert AuditEvent.objects.filter(action="run.status").count() == 1


def test_a_sidecar_status_nobody_knows_is_refused_with_its_reason(live_server, host_tree):
    _kit, root = host_tree
    write_sidecar(root / "llm" / "llama-tiny" / "step-200", status="complete")
    run_agent(live_server.url, root)
    run = Run.objects.get(name="llama-tiny")
    assert run.status == "active" and run.status_source == ""
    assert not AuditEvent.objects.filter(action="run.status").exists()
    copy = CheckpointCopy.objects.get(checkpoint__run=run, checkpoint__step=200, gone_at__isnull=True)
    assert copy.state == "complete"
    assert any("status 'complete' refused (one of active, finished, failed, abandoned)" in r for r in copy.reasons)
