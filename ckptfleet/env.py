"""Strict parsers for settings that come from the environment.

Every parser raises ``ImproperlyConfigured`` naming the variable when its value is malformed, so a
bad deployment fails at start with a message instead of misbehaving later.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from urllib.parse import unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} must be at most {maximum}")
    return value


def env_choice(name: str, default: str, choices: set[str] | frozenset[str]) -> str:
    """One of ``choices``, compared without regard to case and returned as the choice is spelled."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    spelled = {choice.lower(): choice for choice in choices}
    try:
        return spelled[raw.strip().lower()]
    except KeyError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not one of {', '.join(sorted(choices))}") from None


def env_time_zone(name: str, default: str) -> str:
    """An IANA zone name (``Europe/Berlin``): checked against the zone database here, because Django would take any
    string and fail only at the first page that shows a time."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    zone = raw.strip()
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a time zone (an IANA name: UTC, Europe/Berlin)") from None
    return zone


def env_json(name: str, default):
    """The JSON value of NAME, or ``default`` when it is unset or empty; its shape is the caller's to check."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return json.loads(raw)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from None


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_secret(name: str) -> str | None:
    """A secret from NAME, or from the file named by NAME_FILE (the Docker/Kubernetes convention)."""
    value = os.environ.get(name)
    file_name = os.environ.get(f"{name}_FILE")
    if value and file_name:
        raise ImproperlyConfigured(f"set {name} or {name}_FILE, not both")
    if file_name:
        try:
            return Path(file_name).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={file_name!r} cannot be read: {exc.strerror}") from None
    return value or None


AUDIT_KEY_MIN_LENGTH = 32


def audit_key_id(key: str) -> str:
    """A short public name for an audit key: a hash of it, so the name neither reveals the key nor can drift from it."""
    return hashlib.sha256(f"ckptfleet audit key id\n{key}".encode()).hexdigest()[:12]


def check_audit_key(name: str, key: str) -> str:
    if len(key) < AUDIT_KEY_MIN_LENGTH:
        # The message names the variable and the length rule, never the value.
        raise ImproperlyConfigured(f"{name}: an audit key must be at least {AUDIT_KEY_MIN_LENGTH} characters")
    return key


def env_keyring(name: str) -> list[str]:
    """The older audit keys in the file named by NAME: one a line, blank lines and ``#`` comments ignored."""
    file_name = os.environ.get(name, "").strip()
    if not file_name:
        return []
    try:
        text = Path(file_name).read_text()
    except OSError as exc:
        raise ImproperlyConfigured(f"{name}={file_name!r} cannot be read: {exc.strerror}") from None
    keys = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    for number, key in enumerate(keys, 1):
        check_audit_key(f"{name} (key {number})", key)
    return keys


def parse_database_url(name: str, url: str) -> dict:
    """Turn ``postgres://user:pass@host:5432/db`` or ``sqlite:///path`` into a DATABASES entry."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in {"postgres", "postgresql", "pgsql"}:
        db_name = unquote(parts.path.lstrip("/"))
        if not db_name:
            raise ImproperlyConfigured(f"{name} has no database name: {_redact(url)}")
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"{name} has an invalid port: {_redact(url)}") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": db_name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
            # JIT compilation costs 50-200 ms on the 20-60 ms aggregate queries of the dashboard pages
            # (measured by bench/spend_bench.py, see docs/benchmarks.md) and helps none of them.
            "OPTIONS": {"options": "-c jit=off"},
        }
    if scheme == "sqlite":
        # sqlite:///relative.db and sqlite:////absolute/path.db, as dj-database-url reads them.
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        if not path:
            raise ImproperlyConfigured(f"{name} names no SQLite file: {url}")
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": path,
            "OPTIONS": {"timeout": 30, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"},
        }
    raise ImproperlyConfigured(f"{name} has an unsupported scheme {scheme!r} (use postgres:// or sqlite://)")


def parse_owner_database_url(default: dict, url: str | None) -> dict | None:
    """The ``MIGRATE_DATABASE_URL`` connection, checked against ``DATABASE_URL``'s: the same PostgreSQL database
    (host, port, name) as another role, or None when unset. Strict, as every setting is: a URL naming another
    database or engine would migrate something the app never reads."""
    if not url:
        return None
    owner = parse_database_url("MIGRATE_DATABASE_URL", url)
    if owner["ENGINE"] != "django.db.backends.postgresql" or default["ENGINE"] != owner["ENGINE"]:
        raise ImproperlyConfigured("MIGRATE_DATABASE_URL is for PostgreSQL, and DATABASE_URL must name PostgreSQL too")
    for key in ("NAME", "HOST", "PORT"):
        if owner[key] != default[key]:
            raise ImproperlyConfigured(
                f"MIGRATE_DATABASE_URL must name the database DATABASE_URL names ({key} {owner[key]!r} is not "
                f"{default[key]!r}): the owner migrates the very tables the app role reads"
            )
    return owner


def check_url(name: str, url: str, schemes: set[str]) -> str:
    parts = urlsplit(url)
    if parts.scheme not in schemes or not parts.netloc:
        raise ImproperlyConfigured(f"{name}={_redact(url)!r} is not a {'/'.join(sorted(schemes))} URL")
    return url


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url
