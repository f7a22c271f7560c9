"""The single file the hosts run, built from the agent's package by `make agent` (scripts/build_agent.py).

It must be the package's very modules, the same bytes from the same sources, standard library only, and run on
the oldest Python the agent supports (tests/agent_build.py finds one) exactly as the package runs: the same
lines, messages and exit statuses. The end-to-end runs against the real server are in test_agent_e2e.py and the
promotion tests (pulls, offloads), which run this file too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dashboard.management.commands.seed_demo import DEMO_TREES
from tests.agent_build import AGENT_SOURCE, ROOT, build_agent, built_agent_env, fresh_agent


def modules() -> list[Path]:
    return sorted(AGENT_SOURCE.glob("*.py"))


def test_two_builds_of_the_same_sources_are_the_same_bytes_whenever_they_were_checked_out(tmp_path):
    source = tmp_path / "agent"
    shutil.copytree(AGENT_SOURCE, source, ignore=shutil.ignore_patterns("__pycache__"))
    first = build_agent(tmp_path / "first.pyz", source).read_bytes()
    for i, path in enumerate(sorted(source.iterdir())):  # checked out at another time, in another order
        os.utime(path, (2_000_000_000 + i, 2_000_000_000 - i))
    second = build_agent(tmp_path / "second.pyz", source).read_bytes()
    from_checkout = build_agent(tmp_path / "checkout.pyz").read_bytes()
    assert first == second == from_checkout


def test_the_built_file_is_the_packages_modules_byte_for_byte_and_runs_as_a_script(built_agent):
    assert built_agent.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    assert os.access(built_agent, os.X_OK)
    with zipfile.ZipFile(built_agent) as archive:
        names = archive.namelist()
        assert names == sorted(names)
        assert names == sorted(["__main__.py", *(f"ckptfleet_agent/{p.name}" for p in modules())])
        for path in modules():
            assert archive.read(f"ckptfleet_agent/{path.name}") == path.read_bytes(), path.name
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    result = subprocess.run([str(built_agent), "--version"], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout.strip()) == (0, "ckptfleet-agent/0.1.0")


def test_make_agent_builds_the_file_into_dist():
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "agent"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "scripts/build_agent.py --output dist/ckptfleet-agent.pyz" in result.stdout
    ignored = subprocess.run(["git", "check-ignore", "-q", "dist/ckptfleet-agent.pyz"], cwd=ROOT, timeout=60)
    assert ignored.returncode == 0, "dist/ is not in .gitignore"


def test_every_module_compiles_and_imports_on_the_oldest_python(built_agent, oldest_python):
    check = (
        "import sys\n"
        "for path in sys.argv[2:]:\n"
        "    with open(path, 'rb') as f:\n"
        "        compile(f.read(), path, 'exec')\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import importlib\n"
        "for path in sys.argv[2:]:\n"
        "    name = path.rsplit('/', 1)[1][:-3]\n"
        "    if name != '__main__':\n"
        "        importlib.import_module('ckptfleet_agent' + ('' if name == '__init__' else '.' + name))\n"
        "print(*sys.version_info[:2])\n"
    )
    result = subprocess.run(
        [oldest_python, "-I", "-S", "-c", check, str(built_agent), *map(str, modules())],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert (3, 8) <= tuple(map(int, result.stdout.split())) < sys.version_info[:2]


def comparable(stdout: str) -> list[dict]:
    """The lines an inventory sends, but when it was made: the clock and the free space move between two runs."""
    lines = [json.loads(line) for line in stdout.splitlines()]
    for line in lines:
        for key in ("started_at", "checksummed_at", "fs_free_bytes"):
            line.pop(key, None)
    return lines


def test_the_built_file_on_the_oldest_python_says_what_the_package_says(
    built_agent, oldest_python, tmp_path, monkeypatch, capsys
):
    """Without site-packages (``-S``), so without awscrt: the package is loaded likewise without it."""
    root = tmp_path / "root"
    shutil.copytree(DEMO_TREES / "nvme-a", root)
    (root / "bad\x01name.bin").write_bytes(b"x")  # a warning on stderr
    package = fresh_agent(monkeypatch, "agent_for_comparison", without_awscrt=True)
    for name in [n for n in os.environ if n.startswith("CKPTFLEET_")]:
        monkeypatch.delenv(name)
    runs = [
        ["--dry-run", "--host", "gpu-x", "--root", str(root), "--checksums", "--cache", str(tmp_path / "c.sqlite3")],
        ["--dry-run", "--host", "gpu-x", "--root", str(root)],
        ["--dry-run"],  # a usage error: exit 2
        ["--host", "gpu-x", "--root", str(root)],  # no server: exit 1
        ["--root", str(tmp_path / "missing"), "--dry-run"],
        ["lease", "take", "42"],
    ]
    for argv in runs:
        built = subprocess.run(
            [oldest_python, "-I", "-S", str(built_agent), *argv],
            capture_output=True,
            text=True,
            env=built_agent_env(),
            cwd=tmp_path,
            timeout=120,
        )
        code = package.main(argv)
        out, err = capsys.readouterr()
        assert built.returncode == code, (argv, built.stderr, err)
        assert built.stderr == err, argv
        if argv[0] == "--dry-run" and code == 0:
            assert comparable(built.stdout) == comparable(out), argv
        else:
            assert built.stdout == out, argv


@pytest.mark.parametrize("argv", [["--version"], ["lease", "--help"]])
def test_the_installed_console_script_runs_the_package(argv):
    script = Path(sys.executable).parent / "ckptfleet-agent"
    installed = subprocess.run([str(script), *argv], capture_output=True, text=True, timeout=60)
    as_module = subprocess.run([sys.executable, "-m", "fleet.agent", *argv], capture_output=True, text=True, timeout=60)
    assert installed.returncode == as_module.returncode == 0
    assert installed.stdout == as_module.stdout
