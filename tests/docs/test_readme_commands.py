"""Every command the docs show (README.md and the pages of docs/) works when pasted as written: no traceback,
whatever it answers.

The shell blocks are read (``tests.docs.readme_commands``: the README, then the pages in the site's order) and run
in order, in one bash shell (so its ``export`` lines hold for the commands after them), against a fresh SQLite
database in a temporary folder and a server (``runserver``) on a free port. What is not as written, and why:

- the server's address ``http://127.0.0.1:8000`` becomes the test server's port (8000 may be taken);
- ``python`` and ``ckptfleet-agent`` are the project's virtualenv's (as after ``make venv`` or ``pip install``);
- before the commands run, the database is migrated and the people the docs name exist (``ada``, an operator
  and approver, ``grace``, an approver and operator), and ``CKPTFLEET_TOKEN``/``CKPTFLEET_API_TOKEN`` hold a
  token of ada's: the docs assume them;
- each command runs under ``timeout``, so that one that waits for a server that is not there cannot hang the test.

A command may fail (a checkpoint 42 that does not exist, a host that cannot be reached, a bucket without
credentials): that is the reader's situation too. It must say so in words: a Python traceback, or a server's
500, fails the test, naming the command.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.docs.readme_commands import commands

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
README_SERVER = "http://127.0.0.1:8000"
PER_COMMAND_SECONDS = 120
_MARK = "::readme-command::"

SETUP = """
from django.contrib.auth.models import Group, User
from access.services import api_token_create
from audit.actor import Actor
ada = User.objects.create_user("ada", password="a-long-password-1")
grace = User.objects.create_user("grace", password="a-long-password-2")
for user, roles in ((ada, ("operator", "approver")), (grace, ("approver", "operator"))):
    user.groups.add(*Group.objects.filter(name__in=roles))
print(api_token_create(user=ada, label="readme test", actor=Actor.command())[1])
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _environment(var: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
    return {
        **keep,
        "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(var),
        "CKPTFLEET_DEBUG": "1",
        "CKPTFLEET_VAR_DIR": str(var),
        "DJANGO_SETTINGS_MODULE": "ckptfleet.settings",
        # No cloud credentials or instance metadata on a test machine: boto3 should not wait for them.
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(var / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(var / "aws-credentials"),
    }


def _script(lines: list[str], port: int) -> str:
    out = ["set +e"]
    for n, line in enumerate(lines):
        line = line.replace(README_SERVER, f"http://127.0.0.1:{port}")
        out.append(f"printf '\\n{_MARK} {n} start %s\\n' \"$EPOCHREALTIME\"")
        if line.startswith("export "):
            out.append(line)
        else:
            out.append(f"timeout {PER_COMMAND_SECONDS} bash -c {_quote(line)} </dev/null 2>&1")
        out.append(f"printf '\\n{_MARK} {n} rc=%s %s\\n' $? \"$EPOCHREALTIME\"")
    return "\n".join(out) + "\n"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _outputs(log: str, count: int) -> dict[int, tuple[str, str]]:
    found: dict[int, tuple[str, str]] = {}
    for n in range(count):
        match = re.search(rf"{_MARK} {n} start [\d.]+\n(.*?)\n{_MARK} {n} rc=(\d+) ", log, re.S)
        found[n] = (match.group(1), match.group(2)) if match else ("(did not run)", "?")
    return found


def test_the_docs_have_commands_to_check():
    lines = commands()
    assert sum(c.startswith("python manage.py ") for c in lines) > 20
    assert any(c.startswith("ckptfleet-agent ") for c in lines)
    assert any(c.startswith("curl ") for c in lines)
    # Nothing left for the reader to fill in: no "...", "<...>" or "[...]" placeholders in a command.
    placeholders = [c for c in lines if re.search(r"\.\.\./|cfu_\.\.\.\"|<[a-z_ ]+>|\s\[--", c)]
    assert placeholders == []


def test_a_command_without_its_settings_says_which_in_one_line(tmp_path):
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "api_token", "create", "ada", "--label", "x"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0
    assert "DJANGO_SECRET_KEY" in done.stderr and "CKPTFLEET_DEBUG=1" in done.stderr


def test_every_documented_command_runs_without_a_traceback(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    env = _environment(var)
    manage = [sys.executable, "manage.py"]

    def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*manage, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=True
        )

    run("migrate", "--no-input", "-v", "0")
    token = run("shell", "-c", SETUP).stdout.strip().splitlines()[-1]
    env.update(CKPTFLEET_TOKEN=token, CKPTFLEET_API_TOKEN=token)
    port = _free_port()
    server = subprocess.Popen(
        [*manage, "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(var / "server.log", "w"),
    )
    try:
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline, "the test server did not start"
            assert server.poll() is None, (var / "server.log").read_text()
            time.sleep(0.2)
        lines = commands()
        script = var / "readme.sh"
        script.write_text(_script(lines, port))
        log = subprocess.run(
            ["bash", str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600
        ).stdout
        (var / "readme.log").write_text(log)  # for a person reading a failure
    finally:
        server.terminate()
        server.wait(timeout=30)
    server_log = (var / "server.log").read_text()
    problems = []
    for n, (output, rc) in _outputs(log, len(lines)).items():
        if "Traceback (most recent call last)" in output or rc == "?" or rc == "124":
            problems.append(f"{lines[n]}\n  exit {rc}: {output.strip()[-1500:]}")
        elif "Server Error (500)" in output or '"error": "server_error"' in output:
            problems.append(f"{lines[n]}\n  the server answered 500: {output.strip()[-500:]}")
    assert not problems, "Commands in the docs that do not work as written:\n" + "\n".join(problems)
    assert "Traceback" not in server_log, server_log[-3000:]
