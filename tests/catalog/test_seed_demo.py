"""The demo fleet: real layouts on several hosts, broken the way real saves break, and idempotent."""

from __future__ import annotations

from django.core.management import call_command

from catalog.models import CheckpointCopy, Run
from fleet.choices import InventoryStatus
from fleet.models import Host, Inventory


def states() -> dict[tuple[str, str], tuple[str, bool]]:
    rows = CheckpointCopy.objects.filter(gone_at__isnull=True).select_related("location")
    return {(c.location.name, c.path): (c.state, c.temporary) for c in rows}


def test_the_demo_has_hosts_runs_and_broken_checkpoints(db, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", dir=str(tmp_path / "demo"))
    assert Host.objects.count() == 4
    assert Inventory.objects.filter(status=InventoryStatus.APPLIED).count() == 4
    assert {r.team.name for r in Run.objects.select_related("team")} == {"llm", "vision", "nlp", "speech"}
    found = states()
    assert found[("gpu-a01:nvme0", "llm/llama-tiny/step-300")] == ("partial", False)
    assert found[("gpu-a01:nvme0", "llm/llama-tiny/step-400")] == ("partial", True)
    assert found[("lustre-gw1:lustre", "nlp/gpt2-tiny/checkpoint-100")] == ("corrupt", False)
    assert found[("lustre-gw1:lustre", "speech/ds-tiny/global_step200")] == ("partial", False)
    formats = set(CheckpointCopy.objects.values_list("format", flat=True))
    assert {"pytorch_dcp", "hf_safetensors", "hf_trainer", "deepspeed", "megatron", "orbax", "single_file"} <= formats
    assert (tmp_path / "demo-password").exists()

    call_command("seed_demo", dir=str(tmp_path / "demo"))
    again = Inventory.objects.order_by("-id")[:4]
    assert all((i.files_added, i.files_changed, i.files_gone) == (0, 0, 0) for i in again)
    assert states() == found
