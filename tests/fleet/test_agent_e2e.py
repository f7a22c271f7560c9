"""The agent against a real directory tree, pushing over HTTP to the running app.

Each end-to-end test runs twice: with the package (``fleet.agent.main``, what ``ckptfleet-agent`` runs), and with
the single file ``make agent`` builds, run by the oldest Python the agent supports (tests/agent_build.py), as a
bare GPU host runs it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from catalog.models import CheckpointCopy, Run, ShardFile
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from fleet import agent
from fleet.choices import InventoryStatus
from fleet.models import Inventory
from tests.agent_build import built_agent_env


@pytest.fixture(params=["package", "built-file"])
def run_agent(request) -> Callable[..., int]:
    """Run the agent against ``server`` for ``root``; its exit status. Its output goes to this test's stdout and
    stderr either way (``capsys``)."""
    if request.param == "package":

        def in_process(server: str, root: Path, *extra: str) -> int:
            return agent.main(["--server", server, "--host", "gpu-a01", "--root", str(root), "--wait", *extra])

        return in_process
    built, python = request.getfixturevalue("built_agent"), request.getfixturevalue("oldest_python")

    def built_file(server: str, root: Path, *extra: str) -> int:
        result = subprocess.run(
            [python, "-I", str(built), "--server", server, "--host", "gpu-a01", "--root", str(root), "--wait", *extra],
            capture_output=True,
            text=True,
            env=built_agent_env(os.environ.get("CKPTFLEET_TOKEN")),
            cwd=root.parent,
            timeout=120,
        )
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        return result.returncode

    return built_file


def copies() -> dict[tuple[str, int], CheckpointCopy]:
    rows = CheckpointCopy.objects.filter(gone_at__isnull=True).select_related("checkpoint__run")
    return {(c.checkpoint.run.name, c.checkpoint.step): c for c in rows}


def test_the_agent_reports_a_host_and_its_checkpoints_appear(live_server, host_tree, run_agent, capsys):
    _kit, root = host_tree
    assert run_agent(live_server.url, root) == 0
    out = capsys.readouterr().out
    assert "gpu-a01" in out
    inventory = Inventory.objects.get()
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    found = copies()
    assert {("llama-tiny", 100), ("llama-tiny", 200)} <= set(found)
    assert all(c.state == "complete" for c in found.values()), {k: c.reasons for k, c in found.items()}
    assert set(Run.objects.values_list("team__name", flat=True)) == {"llm", "vision"}
    files_on_disk = sum(1 for p in root.rglob("*") if p.is_file())
    assert ShardFile.objects.filter(gone_at__isnull=True).count() == files_on_disk


def test_pushing_the_same_tree_twice_changes_nothing(live_server, host_tree, run_agent):
    _kit, root = host_tree
    assert run_agent(live_server.url, root) == 0
    before = list(ShardFile.objects.order_by("path").values_list("path", "size", "mtime", "changed_at", "copy_id"))
    assert run_agent(live_server.url, root) == 0
    second = Inventory.objects.order_by("-id").first()
    assert (second.files_added, second.files_changed, second.files_gone) == (0, 0, 0)
    after = list(ShardFile.objects.order_by("path").values_list("path", "size", "mtime", "changed_at", "copy_id"))
    assert after == before


def test_a_file_deleted_between_two_pushes(live_server, host_tree, run_agent):
    _kit, root = host_tree
    assert run_agent(live_server.url, root) == 0
    victim = sorted((root / "llm" / "llama-tiny" / "step-200").glob("__1_*.distcp"))[0]
    victim.unlink()
    assert run_agent(live_server.url, root) == 0
    latest = Inventory.objects.order_by("-id").first()
    assert latest.files_gone == 1
    copy = copies()[("llama-tiny", 200)]
    assert copy.state == "partial"
    assert any(victim.name in reason for reason in copy.reasons), copy.reasons
    assert ShardFile.objects.get(path__endswith=f"step-200/{victim.name}").gone_at is not None


def test_the_agent_says_one_line_when_the_token_is_wrong(live_server, host_tree, run_agent, monkeypatch, capsys):
    _kit, root = host_tree
    monkeypatch.setenv("CKPTFLEET_TOKEN", "cfh_000000000000_wrong")
    assert run_agent(live_server.url, root) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ckptfleet-agent:"), err
    assert Inventory.objects.count() == 0


def test_the_built_file_runs_copied_alone_on_the_oldest_python(tmp_path, built_agent, oldest_python):
    copied = tmp_path / "ckptfleet-agent.pyz"
    shutil.copy(built_agent, copied)
    root = tmp_path / "root"
    shutil.copytree(TREES / "nvme-a", root)
    result = subprocess.run(
        [oldest_python, "-I", str(copied), "--dry-run", "--host", "gpu-x", "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=built_agent_env(),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert '"type":"header"' in lines[0] and '"type":"end"' in lines[-1]
    assert any(".metadata" in line and "dcp_metadata" in line for line in lines)


def test_the_agent_sends_checksums_and_the_catalog_keeps_them(live_server, host_tree, run_agent, tmp_path, capsys):
    _kit, root = host_tree
    assert run_agent(live_server.url, root, "--checksums", "--cache", str(tmp_path / "checksums.sqlite3")) == 0
    assert "ckptfleet-agent: checksums: sha256, crc32" in capsys.readouterr().err
    files = {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
    kept = dict(ShardFile.objects.filter(gone_at__isnull=True).values_list("path", "checksum"))
    assert kept.keys() == files.keys()
    assert all(kept[rel] == hashlib.sha256(path.read_bytes()).hexdigest() for rel, path in files.items())
    # A second run reads nothing again (the cache) and the catalog changes nothing.
    assert run_agent(live_server.url, root, "--checksums", "--cache", str(tmp_path / "checksums.sqlite3")) == 0
    latest = Inventory.objects.order_by("-id").first()
    assert (latest.files_added, latest.files_changed, latest.files_gone) == (0, 0, 0)


def test_the_agent_is_installed_as_a_console_script():
    script = Path(sys.executable).parent / "ckptfleet-agent"
    # `make venv` installs the project (pip install -e .); without it the console script is missing.
    assert script.exists(), f"{script} is missing: the project is not installed into this interpreter"
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.strip().startswith("ckptfleet-agent/")


def test_the_agent_reports_the_file_systems_size_and_free_space(live_server, host_tree, run_agent):
    kit, root = host_tree
    assert run_agent(live_server.url, root) == 0
    st = os.statvfs(root)
    kit.location.refresh_from_db()
    assert kit.location.fs_size_bytes == st.f_blocks * st.f_frsize > 0
    # Free space moves as the machine writes; what the agent measured is within a few MiB of ours.
    assert abs(kit.location.fs_free_bytes - st.f_bavail * st.f_frsize) < 256 * 2**20
    assert 0 <= kit.location.fs_free_bytes <= kit.location.fs_size_bytes
    assert kit.location.fs_reported_at is not None
    header = next(iter(agent.inventory_lines(str(root), "gpu-a01")))
    assert header["fs_size_bytes"] == kit.location.fs_size_bytes
