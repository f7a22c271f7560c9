"""Settings come from the environment; a bad value stops the start with a message naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from ckptfleet import env

ROOT = Path(__file__).resolve().parents[2]


def test_database_urls_are_parsed():
    pg = env.parse_database_url("DATABASE_URL", "postgres://fleet:s%40cret@db.internal:6543/ckpt")
    assert pg["ENGINE"] == "django.db.backends.postgresql"
    assert (pg["USER"], pg["PASSWORD"], pg["HOST"], pg["PORT"], pg["NAME"]) == (
        "fleet",
        "s@cret",
        "db.internal",
        "6543",
        "ckpt",
    )
    lite = env.parse_database_url("DATABASE_URL", "sqlite:////var/lib/fleet.sqlite3")
    assert lite["NAME"] == "/var/lib/fleet.sqlite3"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://x@y/z", "unsupported scheme"),
        ("postgres://x@y:port/z", "invalid port"),
        ("postgres://x@y:5432/", "no database name"),
    ],
)
def test_a_bad_database_url_names_the_variable(url, message):
    with pytest.raises(ImproperlyConfigured, match=message) as exc:
        env.parse_database_url("DATABASE_URL", url)
    assert "DATABASE_URL" in str(exc.value)


def test_a_password_is_not_repeated_in_an_error():
    with pytest.raises(ImproperlyConfigured) as exc:
        env.parse_database_url("DATABASE_URL", "postgres://u:hunter2@h:bad/d")
    assert "hunter2" not in str(exc.value)


@pytest.mark.parametrize("raw", ["maybe", "2", "yes please"])
def test_a_bad_boolean_is_refused(monkeypatch, raw):
    monkeypatch.setenv("CKPTFLEET_DEBUG", raw)
    with pytest.raises(ImproperlyConfigured, match="CKPTFLEET_DEBUG"):
        env.env_bool("CKPTFLEET_DEBUG")


def test_a_bad_integer_is_refused(monkeypatch):
    monkeypatch.setenv("CKPTFLEET_INVENTORY_MAX_BYTES", "1GB")
    with pytest.raises(ImproperlyConfigured, match="CKPTFLEET_INVENTORY_MAX_BYTES"):
        env.env_int("CKPTFLEET_INVENTORY_MAX_BYTES", 1)


def test_a_secret_is_read_from_the_file_its_variable_names(monkeypatch, tmp_path):
    (tmp_path / "key").write_text("from-a-file\n")
    monkeypatch.setenv("DJANGO_SECRET_KEY_FILE", str(tmp_path / "key"))
    monkeypatch.delenv("DJANGO_SECRET_KEY", raising=False)
    assert env.env_secret("DJANGO_SECRET_KEY") == "from-a-file"
    monkeypatch.setenv("DJANGO_SECRET_KEY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ImproperlyConfigured, match="DJANGO_SECRET_KEY_FILE"):
        env.env_secret("DJANGO_SECRET_KEY")


def _start(extra: dict[str, str], tmp_path) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}}
    environ.update({"CKPTFLEET_VAR_DIR": str(tmp_path), **extra})
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"CKPTFLEET_DEBUG": "0"}, "DJANGO_SECRET_KEY"),
        ({"CKPTFLEET_DEBUG": "0", "DJANGO_SECRET_KEY": "k" * 50}, "CKPTFLEET_AUDIT_KEY_FILE"),
        ({"CKPTFLEET_DEBUG": "1", "CKPTFLEET_AUDIT_KEY": "short"}, "at least 32 characters"),
        ({"CKPTFLEET_DEBUG": "1", "REDIS_URL": "localhost:6379"}, "REDIS_URL"),
        ({"CKPTFLEET_DEBUG": "1", "DATABASE_URL": "oracle://x/y"}, "DATABASE_URL"),
        # Not JSON: settings say so; an unknown tier: the catalog app says so at start.
        ({"CKPTFLEET_DEBUG": "1", "CKPTFLEET_RESTORE_ASSUMPTIONS": "{"}, "CKPTFLEET_RESTORE_ASSUMPTIONS"),
        ({"CKPTFLEET_DEBUG": "1", "CKPTFLEET_RESTORE_ASSUMPTIONS": '{"tape": {}}'}, "unknown tier 'tape'"),
    ],
)
def test_the_app_refuses_to_start_on_a_bad_setting(tmp_path, extra, named):
    result = _start(extra, tmp_path)
    assert result.returncode != 0
    # One line naming what to set (manage.py), not a traceback.
    assert "manage.py: not configured:" in result.stderr and named in result.stderr
    assert "Traceback" not in result.stderr


def test_the_embedded_default_starts_with_nothing_set(tmp_path):
    result = _start({"CKPTFLEET_DEBUG": "1"}, tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_health_check_answers_without_a_login(client, db):
    response = client.get("/healthz/")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["audit"]["verified_ok"] is None  # nothing verified yet: said, not guessed


def test_collectstatic_succeeds_with_the_production_storage(tmp_path):
    """The image runs collectstatic with the manifest storage, which follows every url() and source-map reference
    in the static files and refuses a missing one (Chart.js names its .map)."""
    key = tmp_path / "key"
    key.write_text("x" * 50)
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"}}
    environ.update(
        {
            "CKPTFLEET_VAR_DIR": str(tmp_path),
            "CKPTFLEET_DEBUG": "0",
            "CKPTFLEET_PLAIN_HTTP": "1",
            "DJANGO_SECRET_KEY_FILE": str(key),
            "CKPTFLEET_AUDIT_KEY": "a" * 32,
            "STATIC_ROOT": str(tmp_path / "static"),
        }
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "static" / "staticfiles.json").exists()
