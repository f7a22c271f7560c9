"""Every setting comes from the strict env module: a bad value stops settings import naming the variable,
and production (CKPTFLEET_DEBUG=0) is served over HTTPS unless plain HTTP is chosen on purpose.

Most cases execute ckptfleet/settings.py afresh in this process (what importing it does, without a Python
start per case); two start manage.py to show that the same refusal stops the real start.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from fleet import s3

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_FILE = ROOT / "ckptfleet" / "settings.py"
KEY = "k3y-" + "x" * 46  # 50 characters: the production settings want a key, the check wants 50
GiB, MiB = 1024**3, 1024**2

# Settings that a developer's or CI's own environment could carry into these cases.
_OURS = ("CKPTFLEET_", "DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "LOG_LEVEL", "ALLOWED_HOSTS", "TIME_ZONE")


def load(monkeypatch, tmp_path, **environ: str) -> dict:
    """The module-level names of ckptfleet/settings.py imported under exactly ``environ``."""
    for name in list(os.environ):
        if name.startswith(_OURS):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CKPTFLEET_VAR_DIR", str(tmp_path))
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))


def production(monkeypatch, tmp_path, **environ: str) -> dict:
    return load(
        monkeypatch, tmp_path, CKPTFLEET_DEBUG="0", DJANGO_SECRET_KEY=KEY, **{"CKPTFLEET_AUDIT_KEY": KEY, **environ}
    )


# Each new variable with bad values, and the words of the refusal beside its name.
BAD = [
    ("CKPTFLEET_PROMOTION_POLL_SECONDS", "0", "must be at least 1"),
    ("CKPTFLEET_PROMOTION_POLL_SECONDS", "5m", "is not an integer"),
    ("CKPTFLEET_PROMOTION_LEASE_SECONDS", "59", "must be at least 60"),
    ("CKPTFLEET_PROMOTION_LEASE_SECONDS", "ten minutes", "is not an integer"),
    ("CKPTFLEET_PROMOTION_MULTIPART_THRESHOLD", "-1", "must be at least 0"),
    ("CKPTFLEET_PROMOTION_MULTIPART_THRESHOLD", str(5 * GiB + 1), f"must be at most {5 * GiB}"),
    ("CKPTFLEET_PROMOTION_MULTIPART_PART_SIZE", str(5 * MiB - 1), f"must be at least {5 * MiB}"),
    ("CKPTFLEET_PROMOTION_MULTIPART_PART_SIZE", str(5 * GiB + 1), f"must be at most {5 * GiB}"),
    ("CKPTFLEET_PROMOTION_MULTIPART_PART_SIZE", "512MiB", "is not an integer"),
    ("CKPTFLEET_RETENTION_MIN_STORAGE_DAYS", '{"GLACIER": 90', "is not valid JSON"),
    ("CKPTFLEET_RETENTION_MIN_STORAGE_DAYS", "[90]", "must be a JSON object by storage class"),
    ("CKPTFLEET_RETENTION_MIN_STORAGE_DAYS", '{"glacier": 90}', "is not a storage class"),
    ("CKPTFLEET_RETENTION_MIN_STORAGE_DAYS", '{"GLACIER": -1}', "is not a whole number of days"),
    ("CKPTFLEET_RETENTION_MIN_STORAGE_DAYS", '{"GLACIER": 1.5}', "is not a whole number of days"),
    ("CKPTFLEET_RETENTION_MIN_STORAGE_DAYS", '{"GLACIER": "90"}', "is not a whole number of days"),
    ("CKPTFLEET_RETENTION_REQUEST_PRICE_PER_1000", "0.05", "must be a JSON object by storage class"),
    ("CKPTFLEET_RETENTION_REQUEST_PRICE_PER_1000", '{"DEEP_ARCHIVE": "cheap"}', "is not a price"),
    ("CKPTFLEET_RETENTION_REQUEST_PRICE_PER_1000", '{"DEEP_ARCHIVE": -0.05}', "is not a price"),
    ("CKPTFLEET_RETENTION_REQUEST_PRICE_PER_1000", '{"DEEP_ARCHIVE": "NaN"}', "is not a price"),
    ("CKPTFLEET_RETENTION_REQUEST_PRICE_PER_1000", '{"DEEP_ARCHIVE": true}', "is not a price"),
    ("CKPTFLEET_DEMO_S3", "127.0.0.1:5055", "is not a http/https URL"),
    ("CKPTFLEET_AUDIT_KEY", "too-short", "at least 32 characters"),
    ("CKPTFLEET_AUDIT_KEYRING_FILE", "/nonexistent/audit-keyring", "cannot be read"),
    ("CKPTFLEET_AUDIT_ANCHOR_S3", "anchors-bucket/audit/", "is not a s3 URL"),
    ("CKPTFLEET_AUDIT_ANCHOR_S3_ENDPOINT", "127.0.0.1:9000", "is not a http/https URL"),
    ("CKPTFLEET_AUDIT_ANCHOR_S3_ADDRESSING", "sideways", "is not one of"),
    ("CKPTFLEET_AUDIT_ANCHOR_RETAIN_DAYS", "0", "must be at least 1"),
    ("CKPTFLEET_AUDIT_ANCHOR_MINUTES", "0", "must be at least 1"),
    ("CKPTFLEET_AUDIT_VERIFY_MINUTES", "hourly", "is not an integer"),
    ("LOG_LEVEL", "verbose", "is not one of"),
    ("TIME_ZONE", "Europe/Atlantis", "is not a time zone"),
    ("TIME_ZONE", "../etc/passwd", "is not a time zone"),
    ("CKPTFLEET_PLAIN_HTTP", "maybe", "is not a boolean"),
    ("CKPTFLEET_BEHIND_TLS_PROXY", "nginx", "is not a boolean"),
    ("CKPTFLEET_SSL_REDIRECT", "sometimes", "is not a boolean"),
    ("CKPTFLEET_HSTS_SECONDS", "-1", "must be at least 0"),
    ("CKPTFLEET_HSTS_SECONDS", "1y", "is not an integer"),
    ("CKPTFLEET_HSTS_INCLUDE_SUBDOMAINS", "all", "is not a boolean"),
    ("CKPTFLEET_HSTS_PRELOAD", "please", "is not a boolean"),
    ("CKPTFLEET_X_FRAME_OPTIONS", "ALLOW-FROM https://portal.example.com", "is not one of DENY, SAMEORIGIN"),
    ("CKPTFLEET_REFERRER_POLICY", "never", "is not one of"),
]


@pytest.mark.parametrize(("name", "value", "words"), BAD)
def test_a_bad_value_stops_settings_import_naming_the_variable(monkeypatch, tmp_path, name, value, words):
    with pytest.raises(ImproperlyConfigured) as refused:
        production(monkeypatch, tmp_path, **{name: value})
    assert name in str(refused.value) and words in str(refused.value)


@pytest.mark.parametrize(("name", "value", "words"), [BAD[0], BAD[-2]])
def test_a_bad_value_is_refused_in_development_too(monkeypatch, tmp_path, name, value, words):
    with pytest.raises(ImproperlyConfigured, match=name):
        load(monkeypatch, tmp_path, CKPTFLEET_DEBUG="1", **{name: value})


@pytest.mark.parametrize(
    "contradiction",
    [
        {"CKPTFLEET_PLAIN_HTTP": "1", "CKPTFLEET_BEHIND_TLS_PROXY": "1"},
        {"CKPTFLEET_PLAIN_HTTP": "1", "CKPTFLEET_SSL_REDIRECT": "1"},
    ],
)
def test_plain_http_contradicting_https_settings_is_refused(monkeypatch, tmp_path, contradiction):
    with pytest.raises(ImproperlyConfigured) as refused:
        production(monkeypatch, tmp_path, **contradiction)
    assert all(name in str(refused.value) for name in contradiction)


@pytest.mark.parametrize(
    ("name", "value"),
    [("CKPTFLEET_RETENTION_MIN_STORAGE_DAYS", '{"GLACIER": -1}'), ("CKPTFLEET_HSTS_SECONDS", "a year")],
)
def test_the_refusal_stops_the_real_start(tmp_path, name, value):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(_OURS)}
    environ.update(
        {
            "CKPTFLEET_VAR_DIR": str(tmp_path),
            "CKPTFLEET_DEBUG": "0",
            "DJANGO_SECRET_KEY": KEY,
            "CKPTFLEET_AUDIT_KEY": KEY,
            name: value,
        }
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert f"manage.py: not configured: {name}" in done.stderr, done.stderr[-2000:]


def test_the_defaults_are_the_ones_the_code_had(monkeypatch, tmp_path):
    values = production(monkeypatch, tmp_path)
    assert values["PROMOTION_POLL_SECONDS"] == 300
    assert values["PROMOTION_LEASE_SECONDS"] == 600
    assert values["PROMOTION_MULTIPART_THRESHOLD"] == s3.MULTIPART_COPY_THRESHOLD
    assert values["PROMOTION_MULTIPART_PART_SIZE"] == s3.MULTIPART_COPY_PART_SIZE
    assert values["RETENTION_MIN_STORAGE_DAYS"] == {}
    assert values["RETENTION_REQUEST_PRICE_PER_1000"] == {}
    assert values["DELETION_GRACE_DAYS"] == 7
    assert values["DELETION_APPROVAL_BYTES"] == 10 * 1024**4
    assert values["RESTORE_ASSUMPTIONS"] == {}
    assert values["DEMO_S3_ENDPOINT"] == ""
    assert values["LOGGING"]["root"]["level"] == "INFO"
    assert values["TIME_ZONE"] == "UTC"


def test_the_new_variables_are_read(monkeypatch, tmp_path):
    values = production(
        monkeypatch,
        tmp_path,
        CKPTFLEET_PROMOTION_POLL_SECONDS="30",
        CKPTFLEET_PROMOTION_LEASE_SECONDS="60",
        CKPTFLEET_PROMOTION_MULTIPART_THRESHOLD="0",
        CKPTFLEET_PROMOTION_MULTIPART_PART_SIZE=str(5 * MiB),
        CKPTFLEET_RETENTION_MIN_STORAGE_DAYS='{"STANDARD_IA": 0, "DEEP_ARCHIVE": 365}',
        CKPTFLEET_RETENTION_REQUEST_PRICE_PER_1000='{"DEEP_ARCHIVE": "0.04", "GLACIER": 0.03, "STANDARD": 0}',
        CKPTFLEET_DEMO_S3="http://127.0.0.1:5055",
        LOG_LEVEL="warning",
        TIME_ZONE="Europe/Berlin",
    )
    assert (values["PROMOTION_POLL_SECONDS"], values["PROMOTION_LEASE_SECONDS"]) == (30, 60)
    assert (values["PROMOTION_MULTIPART_THRESHOLD"], values["PROMOTION_MULTIPART_PART_SIZE"]) == (0, 5 * MiB)
    assert values["RETENTION_MIN_STORAGE_DAYS"] == {"STANDARD_IA": 0, "DEEP_ARCHIVE": 365}
    assert values["RETENTION_REQUEST_PRICE_PER_1000"] == {
        "DEEP_ARCHIVE": Decimal("0.04"),
        "GLACIER": Decimal("0.03"),
        "STANDARD": Decimal(0),
    }
    assert values["DEMO_S3_ENDPOINT"] == "http://127.0.0.1:5055"
    assert values["LOGGING"]["root"]["level"] == "WARNING"
    assert values["TIME_ZONE"] == "Europe/Berlin"


def test_production_is_https_with_secure_httponly_cookies_and_hsts(monkeypatch, tmp_path):
    values = production(monkeypatch, tmp_path)
    assert values["SESSION_COOKIE_SECURE"] and values["CSRF_COOKIE_SECURE"]
    assert values["SESSION_COOKIE_HTTPONLY"] and values["CSRF_COOKIE_HTTPONLY"]
    assert values["SECURE_SSL_REDIRECT"]
    assert values["SECURE_HSTS_SECONDS"] == 365 * 24 * 3600
    assert values["SECURE_HSTS_INCLUDE_SUBDOMAINS"] and not values["SECURE_HSTS_PRELOAD"]
    assert values["SECURE_CONTENT_TYPE_NOSNIFF"]
    assert (values["X_FRAME_OPTIONS"], values["SECURE_REFERRER_POLICY"]) == ("DENY", "same-origin")
    # The proxy's header is trusted only when a variable says there is a proxy that sets it.
    assert "SECURE_PROXY_SSL_HEADER" not in values


def test_behind_a_tls_proxy_its_forwarded_proto_is_trusted(monkeypatch, tmp_path):
    values = production(monkeypatch, tmp_path, CKPTFLEET_BEHIND_TLS_PROXY="1", CKPTFLEET_HSTS_PRELOAD="1")
    assert values["SECURE_PROXY_SSL_HEADER"] == ("HTTP_X_FORWARDED_PROTO", "https")
    assert values["SECURE_SSL_REDIRECT"] and values["SESSION_COOKIE_SECURE"] and values["SECURE_HSTS_PRELOAD"]


def test_plain_http_is_a_deliberate_setting(monkeypatch, tmp_path):
    values = production(monkeypatch, tmp_path, CKPTFLEET_PLAIN_HTTP="1")
    assert not values["SESSION_COOKIE_SECURE"] and not values["CSRF_COOKIE_SECURE"]
    assert not values["SECURE_SSL_REDIRECT"] and values["SECURE_HSTS_SECONDS"] == 0
    assert values["SESSION_COOKIE_HTTPONLY"] and values["CSRF_COOKIE_HTTPONLY"]


def test_a_proxy_that_redirects_itself_can_turn_the_redirect_off(monkeypatch, tmp_path):
    values = production(monkeypatch, tmp_path, CKPTFLEET_SSL_REDIRECT="0")
    assert not values["SECURE_SSL_REDIRECT"] and values["SESSION_COOKIE_SECURE"]


def test_development_keeps_djangos_defaults(monkeypatch, tmp_path):
    values = load(monkeypatch, tmp_path, CKPTFLEET_DEBUG="1")
    for name in ("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS"):
        assert name not in values


def _https_settings(values: dict) -> dict:
    names = [name for name in values if name.startswith(("SECURE_", "SESSION_COOKIE_", "CSRF_COOKIE_"))]
    return {name: values[name] for name in names}


def test_the_health_check_answers_plain_http_while_pages_go_to_https(client, db, monkeypatch, tmp_path):
    with override_settings(**_https_settings(production(monkeypatch, tmp_path))):
        probe = client.get("/healthz/")
        assert probe.status_code == 200 and probe.json()["status"] == "ok"
        scrape = client.get("/metrics")
        assert scrape.status_code == 200 and scrape["Content-Type"].startswith("text/plain; version=0.0.4")
        page = client.get("/accounts/login/")
        assert page.status_code == 301 and page["Location"] == "https://testserver/accounts/login/"
        secure = client.get("/healthz/", secure=True)
        assert secure["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains"


def test_behind_the_proxy_a_forwarded_https_request_is_served(client, db, monkeypatch, tmp_path):
    values = production(monkeypatch, tmp_path, CKPTFLEET_BEHIND_TLS_PROXY="1")
    with override_settings(**_https_settings(values)):
        page = client.get("/accounts/login/", headers={"X-Forwarded-Proto": "https"})
        assert page.status_code == 200
        assert page["Strict-Transport-Security"].startswith("max-age=31536000")
        assert client.get("/healthz/").status_code == 200
        assert client.get("/accounts/login/").status_code == 301


def test_the_audit_key_and_its_keyring_are_read_by_id(monkeypatch, tmp_path):
    from ckptfleet.env import audit_key_id

    current, old = "c" * 40, "o" * 40
    ring = tmp_path / "keyring"
    ring.write_text(f"# rotated out\n{old}\n")
    key_file = tmp_path / "audit_key"
    key_file.write_text(current + "\n")
    values = production(
        monkeypatch, tmp_path, CKPTFLEET_AUDIT_KEY="", CKPTFLEET_AUDIT_KEY_FILE=str(key_file),
        CKPTFLEET_AUDIT_KEYRING_FILE=str(ring),
    )  # fmt: skip
    assert values["AUDIT_KEY_ID"] == audit_key_id(current)
    assert values["AUDIT_KEYS"] == {audit_key_id(current): current, audit_key_id(old): old}


def test_development_makes_an_audit_key_once_and_keeps_it(monkeypatch, tmp_path):
    first = load(monkeypatch, tmp_path, CKPTFLEET_DEBUG="1")
    key_file = tmp_path / "dev-audit-key"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert first["AUDIT_KEYS"] == {first["AUDIT_KEY_ID"]: key_file.read_text().strip()}
    assert load(monkeypatch, tmp_path, CKPTFLEET_DEBUG="1")["AUDIT_KEY_ID"] == first["AUDIT_KEY_ID"]
    assert first["AUDIT_ANCHOR_DIR"] == str(tmp_path / "audit-anchors")
    assert production(monkeypatch, tmp_path)["AUDIT_ANCHOR_DIR"] == ""  # production anchors where it is told
