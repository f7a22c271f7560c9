"""The lock's cooling-off and a change request's expiry come from the strict env module, with bounds."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "ckptfleet" / "settings.py"


def load(monkeypatch, tmp_path, **environ: str) -> dict:
    for name in list(os.environ):
        if name.startswith(("CKPTFLEET_", "DATABASE_URL", "REDIS_URL")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("CKPTFLEET_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("CKPTFLEET_DEBUG", "1")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS_FILE))


def test_the_defaults_are_72_hours_and_14_days(monkeypatch, tmp_path):
    values = load(monkeypatch, tmp_path)
    assert values["POLICY_LOCK_COOLING_OFF_HOURS"] == 72 and values["CHANGE_REQUEST_EXPIRY_DAYS"] == 14
    values = load(monkeypatch, tmp_path, CKPTFLEET_POLICY_LOCK_COOLING_OFF_HOURS="24")
    assert values["POLICY_LOCK_COOLING_OFF_HOURS"] == 24


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("CKPTFLEET_POLICY_LOCK_COOLING_OFF_HOURS", "0", "must be at least 1"),
        ("CKPTFLEET_POLICY_LOCK_COOLING_OFF_HOURS", "72h", "is not an integer"),
        ("CKPTFLEET_POLICY_LOCK_COOLING_OFF_HOURS", "9000", "must be at most 8784"),
        ("CKPTFLEET_CHANGE_REQUEST_EXPIRY_DAYS", "0", "must be at least 1"),
    ],
)
def test_a_bad_value_stops_settings_naming_the_variable(monkeypatch, tmp_path, name, value, words):
    with pytest.raises(ImproperlyConfigured, match=f"{name}.*{words}"):
        load(monkeypatch, tmp_path, **{name: value})
