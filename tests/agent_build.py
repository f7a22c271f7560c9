"""The host agent as the hosts run it: the one file ``make agent`` builds, run by the oldest Python it supports.

Fixtures (a pytest plugin, named in tests/conftest.py's ``pytest_plugins``):

- ``built_agent``: the path of the agent's single file, built by scripts/build_agent.py (what `make agent` runs)
  into a temporary folder once per test session;
- ``oldest_python``: the oldest interpreter on this machine the agent supports and the server's own is newer
  than (3.8, else 3.9, else 3.10; ``CKPTFLEET_AGENT_PYTHON`` names one explicitly). None found is a skip, or a
  failure under REQUIRE_SERVICES=1 (CI), as for a missing service: the promise is that the hosts' old Pythons
  run the agent, and only running it there keeps it.

``fresh_agent`` loads another copy of the package (under another name), e.g. where ``import awscrt`` fails.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleet import agent

ROOT = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = ROOT / "scripts" / "build_agent.py"
AGENT_SOURCE = Path(agent.__file__).parent
OLDEST_SUPPORTED = (3, 8)


def build_agent(output: Path, source: Path = AGENT_SOURCE) -> Path:
    """Build the single file as `make agent` does (scripts/build_agent.py, run by this interpreter)."""
    subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--output", str(output), "--source", str(source)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return output


def _version(python: str) -> tuple[int, int] | None:
    try:
        result = subprocess.run(
            [python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return None
    if result.returncode != 0:  # e.g. a pyenv shim of a version that is not selected
        return None
    major, minor = result.stdout.strip().split(".")
    return int(major), int(minor)


def find_oldest_python() -> tuple[str, tuple[int, int]] | None:
    """(path, version) of the oldest interpreter from 3.8 up to, not including, the running one; None if none."""
    named = os.environ.get("CKPTFLEET_AGENT_PYTHON")
    if named:
        version = _version(named)
        return (named, version) if version is not None else None
    for minor in range(OLDEST_SUPPORTED[1], sys.version_info[1]):
        candidates = [
            shutil.which(f"python3.{minor}"),
            *sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/3.{minor}.*/bin/python3")), reverse=True),
            f"/usr/bin/python3.{minor}",
            f"/usr/local/bin/python3.{minor}",
        ]
        for python in candidates:
            if python and os.path.exists(python) and _version(python) == (3, minor):
                return python, (3, minor)
    return None


@pytest.fixture(scope="session")
def built_agent(tmp_path_factory) -> Path:
    return build_agent(tmp_path_factory.mktemp("agent-build") / "ckptfleet-agent.pyz")


@pytest.fixture(scope="session")
def oldest_python() -> str:
    from tests.conftest import need_service

    found = find_oldest_python()
    need_service(
        "a Python older than the server's that the agent supports (3.8, 3.9 or 3.10)",
        found is not None,
        "install one (pyenv install 3.8) or name it in CKPTFLEET_AGENT_PYTHON",
    )
    assert found is not None
    return found[0]


def built_agent_env(token: str | None = None) -> dict[str, str]:
    """The environment of an agent on a host: none of ours (no CKPTFLEET_*, PYTHON*, AWS_* or proxy)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CKPTFLEET_", "PYTHON", "AWS_"))}
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        env.pop(name, None)
    if token is not None:
        env["CKPTFLEET_TOKEN"] = token
    return env


def fresh_agent(monkeypatch, name: str, *, without_awscrt: bool = False):
    """Another copy of the agent's package, loaded as ``name`` (its modules as ``name.walk``...), forgotten after
    the test; ``without_awscrt``: where ``import awscrt`` fails, as on a bare GPU host."""
    if without_awscrt:
        monkeypatch.setitem(sys.modules, "awscrt", None)
        monkeypatch.setitem(sys.modules, "awscrt.checksums", None)
    # Each module the copy will import is registered here first, so that the test's end removes it again.
    for path in AGENT_SOURCE.glob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            monkeypatch.setitem(sys.modules, f"{name}.{path.stem}", None)
            del sys.modules[f"{name}.{path.stem}"]
    spec = importlib.util.spec_from_file_location(
        name, AGENT_SOURCE / "__init__.py", submodule_search_locations=[str(AGENT_SOURCE)]
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses and relative imports look it up
    spec.loader.exec_module(module)
    return module
