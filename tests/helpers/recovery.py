"""Two GPU hosts holding DCP saves of one run, as the recovery tests need them: real torch.distributed.checkpoint
files (the demo's), the sidecar a training job writes, file times of the save, walked by the real agent with content
checksums and uploaded through the inventory API. The clock is set to ``NOW`` (``recovery_clock`` fixture)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from catalog.models import Run
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from fleet import agent
from fleet.models import Host
from fleet.services import gzip_lines
from tests.helpers.ingest import post

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
SAVED_HOURS_AGO = {100: 5.0, 200: 3.0, 300: 1.0}


def save(root: Path, step: int, *, sidecar: bool = True) -> Path:
    """A two-rank DCP save of llm/titan at ``step`` (the demo's real torch.distributed.checkpoint files), with the
    sidecar a training job writes (the files' sha256 at save time) and the file times of its save."""
    folder = root / f"llm/titan/step-{step}"
    shutil.copytree(TREES / "nvme-a/llm/llama-tiny/step-100", folder)
    if sidecar:
        files = [
            {"path": p.name, "size": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
            for p in sorted(folder.iterdir())
        ]
        body = {"schema": "ckptfleet/1", "team": "llm", "run": "titan", "step": step, "format": "pytorch_dcp"}
        (folder / "ckptfleet.json").write_text(json.dumps(body | {"files": files}))
    at = (NOW - timedelta(hours=SAVED_HOURS_AGO[step])).timestamp()
    for path in folder.iterdir():
        os.utime(path, (at, at))
    return folder


def report(client, make_host, name: str, root: Path, django_capture_on_commit_callbacks) -> None:
    kit = make_host(name=name, root=str(root))
    Host.objects.filter(name=name).update(gpus=8)
    lines = list(agent.inventory_lines(str(root) + "/", name, checksums=True, started_at="2026-11-22T11:59:00Z"))
    with django_capture_on_commit_callbacks(execute=True):
        assert post(client, kit, gzip_lines(lines)).status_code == 202


def _r(value, digits=1):
    return round(value, digits) if value is not None else None


def answers(client, run: Run) -> dict[str, tuple]:
    """(checkpoint id, steps lost, GPU-hours lost) from every surface that answers "what do we restore from"."""
    page = client.get(f"/recovery/{run.pk}/")
    assert page.status_code == 200
    rec, point = page.context["recovery"], page.context["recovery_point"]
    html = page.content.decode()
    headline = re.search(r'id="restore-title".*?</h2>', html, re.S)
    pin = re.search(r'name="checkpoint" value="(\d+)"', html)
    card = re.search(r'id="recovery-point".*?</section>', html, re.S).group(0)
    loss = (point.lost_steps, _r(point.gpu_hours))
    out = {
        "recovery page": (rec.checkpoint.pk if rec.checkpoint else None, *loss),
        "page headline": (int(re.findall(r"/checkpoints/(\d+)/", headline.group(0))[0]) if headline else None, *loss),
        "pin and hold": (int(pin.group(1)) if pin else None, *loss),
    }
    if point.lost_steps is not None:
        assert f"{point.lost_steps:,} step" in card
    rp = client.get(f"/api/v1/runs/{run.pk}/recovery-point/").json()
    out["recovery-point API"] = (rp["checkpoint"], rp["lost_steps"], rp["lost_gpu_hours"])
    listed = {p["run"]: p for p in client.get("/api/v1/recovery/points/").json()["results"]}
    if run.pk in listed:
        p = listed[run.pk]
        out["recovery points API"] = (p["checkpoint"], p["lost_steps"], p["lost_gpu_hours"])
    out["recovery API"] = (client.get(f"/api/v1/recovery/{run.pk}/").json()["checkpoint"], *loss)
    resume = client.get(f"/api/v1/runs/{run.pk}/resume/").json()
    if resume["resume"] is None:
        out["resume"] = (None, resume["lost_steps"], resume["lost_gpu_hours"])
    else:
        r = resume["resume"]
        out["resume"] = (r["checkpoint"], r["lost_steps"], r["lost_gpu_hours"])
    ladder = client.get(f"/api/v1/runs/{run.pk}/ladder/").json()["ladder"]
    first = next((rung for rung in ladder if rung["position"] == 1), None)
    if first is not None:
        out["ladder"] = (first["checkpoint"], first["steps_lost"], first["gpu_hours"])
    elif point.checkpoint is None:
        out["ladder"] = (None, *loss)
    return out
