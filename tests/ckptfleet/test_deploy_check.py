"""`manage.py check --deploy --fail-level WARNING` passes with the production environment the docs document
(docs/admin/production.md, "The production environment"), and `make check-deploy` (which CI runs) uses that same
environment."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_PAGE = ROOT / "docs" / "admin" / "production.md"
# Stood in for by a throw-away key file and an SQLite file: the check opens neither for real.
STAND_INS = {"DJANGO_SECRET_KEY_FILE", "CKPTFLEET_AUDIT_KEY_FILE", "DATABASE_URL"}


def documented_production_env() -> dict[str, str]:
    """The NAME=value lines of the environment block in "The production environment" of docs/admin/production.md."""
    text = PRODUCTION_PAGE.read_text()
    section = text.split("\n## The production environment\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    [block] = [b for b in blocks if "CKPTFLEET_DEBUG=0" in b]
    environ = {}
    for line in block.splitlines():
        name, _, value = line.partition("=")
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*", name) and value, f"not NAME=value: {line!r}"
        environ[name] = value
    return environ


def makefile_deploy_env() -> dict[str, str]:
    text = (ROOT / "Makefile").read_text()
    raw = re.search(r"^DEPLOY_ENV = (.*?)(?<!\\)\n", text, re.S | re.M).group(1).replace("\\\n", " ")
    return dict(word.split("=", 1) for word in shlex.split(raw))


def test_the_docs_document_a_production_environment():
    environ = documented_production_env()
    assert environ["CKPTFLEET_DEBUG"] == "0"
    assert STAND_INS <= set(environ)
    assert "CKPTFLEET_PLAIN_HTTP" not in environ, "the documented production is HTTPS"


def test_make_check_deploy_uses_the_documented_environment():
    documented = {name: value for name, value in documented_production_env().items() if name not in STAND_INS}
    assert makefile_deploy_env() == documented


def test_the_deploy_check_passes_with_the_documented_environment(tmp_path):
    key = tmp_path / "django_secret_key"
    key.write_text(secrets.token_urlsafe(50))
    audit_key = tmp_path / "audit_key"
    audit_key.write_text(secrets.token_urlsafe(48))
    environ = {
        # Nothing of the caller's own settings: only what the docs say, as `make check-deploy` runs it.
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        **documented_production_env(),
        "DJANGO_SECRET_KEY_FILE": str(key),
        "CKPTFLEET_AUDIT_KEY_FILE": str(audit_key),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'ckptfleet.sqlite3'}",
        "CKPTFLEET_VAR_DIR": str(tmp_path / "var"),
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "System check identified no issues" in done.stdout


def test_without_https_the_deploy_check_fails(tmp_path):
    """The check is a real gate: plain HTTP, a deliberate setting, still does not pass for production."""
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        **documented_production_env(),
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "CKPTFLEET_AUDIT_KEY": secrets.token_urlsafe(48),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'ckptfleet.sqlite3'}",
        "CKPTFLEET_VAR_DIR": str(tmp_path / "var"),
        "CKPTFLEET_BEHIND_TLS_PROXY": "0",
        "CKPTFLEET_PLAIN_HTTP": "1",
    }
    del environ["DJANGO_SECRET_KEY_FILE"], environ["CKPTFLEET_AUDIT_KEY_FILE"]
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode != 0
    assert {"security.W008", "security.W012", "security.W016"} <= set(re.findall(r"security\.W\d+", done.stderr))
