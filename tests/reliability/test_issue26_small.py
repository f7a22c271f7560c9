"""The smaller attacks of issue 26, each refused now: a lone surrogate in an inventory line's facts, ids in digits
that are not ASCII, pages without a Content-Security-Policy, and a compliance hold of seconds.

Each printed figure is what was tried and what was refused."""

from __future__ import annotations

import functools
import gzip
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine

from actions import services
from actions.models import Hold, HoldMode, Pin
from audit.models import AuditEvent
from catalog.models import ShardFile
from ckptfleet.errors import DomainError
from fleet.choices import InventoryStatus
from fleet.models import Inventory
from tests.actions.conftest import as_ui, build_fleet, make_person
from tests.factories import CheckpointFactory, RunFactory
from tests.helpers.ingest import dcp
from tests.reliability.conftest import report

pytestmark = pytest.mark.django_db


def upload(client, kit, text: bytes, django_capture_on_commit_callbacks) -> Inventory:
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/api/v1/inventories/",
            data=gzip.compress(text),
            content_type="application/x-ndjson",
            HTTP_CONTENT_ENCODING="gzip",
            **kit.auth(),
        )
    assert response.status_code == 202, response.content
    return Inventory.objects.get(pk=response.json()["id"])


def ndjson(lines: list[dict], *, replace: tuple[str, str] | None = None) -> bytes:
    text = "".join(json.dumps(line) + "\n" for line in lines)
    if replace:
        text = text.replace(*replace)
    return text.encode()


# --- a lone surrogate in the facts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("inventory", ["first", "second"])
def test_a_lone_surrogate_in_the_facts_fails_the_inventory_whole(
    make_host, client, django_capture_on_commit_callbacks, inventory
):
    """On main: the first inventory's task crashed (jsonb refused the text; SQLite's orjson path too) and the upload
    stayed "processing" for two hours. Now it fails at once, naming the line, and applies nothing."""
    kit = make_host()
    if inventory == "second":
        first = upload(client, kit, ndjson(kit.lines(dcp(100))), django_capture_on_commit_callbacks)
        assert first.status == InventoryStatus.APPLIED, first.error
    before = list(ShardFile.objects.order_by("pk").values("path", "size", "facts", "gone_at"))
    files = dcp(100) + dcp(200)
    files[3]["facts"] = {"kind": "dcp_metadata", "files": {"__0_0.distcp": 4096}, "run": "MARK"}
    lines = kit.lines(files)
    bad = upload(client, kit, ndjson(lines, replace=('"MARK"', '"x\\ud800"')), django_capture_on_commit_callbacks)
    assert bad.status == InventoryStatus.FAILED
    assert bad.error_line == 5 and "not valid UTF-8 (a lone surrogate)" in bad.error, bad.error
    assert list(ShardFile.objects.order_by("pk").values("path", "size", "facts", "gone_at")) == before
    report(f"lone surrogate in the facts of a {inventory} inventory", f"{bad.status}: {bad.error}")


# --- ids in digits that are not ASCII ------------------------------------------------------------------------------

NOT_ASCII = {"Arabic-Indic 3": "%D9%A3", "full-width 3": "%EF%BC%93", "superscript 1": "%C2%B9"}


def test_an_id_in_digits_that_are_not_ascii_is_a_400_on_the_checkpoints_list(signed_in):
    """On main ``?run=٣`` and full-width 3 were read as run 3 (200, its checkpoints)."""
    run = RunFactory(pk=3)
    CheckpointFactory(run=run)
    refused = 0
    for name, digit in NOT_ASCII.items():
        for parameter in ("run", "step"):
            response = signed_in.get(f"/api/v1/checkpoints/?{parameter}={digit}")
            assert response.status_code == 400, (name, parameter, response.content)
            assert response.json()["error"] == "bad_parameter"
            assert response.json()["detail"].startswith(f"{parameter} must be")
            refused += 1
    assert signed_in.get("/api/v1/checkpoints/?run=3").json()["results"]
    report("ids in digits that are not ASCII on /api/v1/checkpoints/", f"{refused} of {2 * len(NOT_ASCII)} refused")


NOT_ASCII_IN_JSON = {"Arabic-Indic 3": "\u0663", "full-width 3": "\uff13", "a boolean": True}


def test_an_id_in_digits_that_are_not_ascii_is_a_400_in_a_json_body_and_changes_nothing(signed_in):
    """On main a pin or hold asked for ``{"checkpoint": "\u0663"}`` or ``{"run": true}``, and REST framework read it as
    checkpoint 3 or run 1 (``int(str(value))``). Each is a 400 naming the field now, and nothing is pinned or held."""
    run = RunFactory(pk=1)
    CheckpointFactory(pk=3, run=run)
    events = AuditEvent.objects.count()
    refused = 0
    for name, value in NOT_ASCII_IN_JSON.items():
        for path, body in (
            ("/api/v1/actions/pins/", {"checkpoint": value, "reason": "r"}),
            ("/api/v1/actions/holds/", {"run": value, "reason": "r"}),
        ):
            response = signed_in.post(path, body, content_type="application/json")
            assert response.status_code == 400, (name, path, response.content)
            assert set(response.json()["fields"]) == set(body) - {"reason"}, response.json()
            refused += 1
    assert not Hold.objects.exists() and not Pin.objects.exists() and AuditEvent.objects.count() == events
    pinned = signed_in.post(
        "/api/v1/actions/pins/", {"checkpoint": "3", "reason": "the paper run"}, content_type="application/json"
    )
    assert pinned.status_code == 201, pinned.content
    report(
        "ids in digits that are not ASCII in a JSON body (pins, holds)",
        f"{refused} of {2 * len(NOT_ASCII_IN_JSON)} refused",
    )


# --- a compliance hold of seconds ----------------------------------------------------------------------------------

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ahead", "min_days", "allowed"),
    [
        (timedelta(seconds=70), 1, False),  # accepted on main
        (timedelta(hours=23, minutes=59), 1, False),
        (timedelta(days=1), 1, True),
        (timedelta(days=6), 7, False),
        (timedelta(days=7), 7, True),
    ],
)
def test_a_compliance_hold_shorter_than_the_minimum_is_refused_and_changes_nothing(ahead, min_days, allowed, settings):
    settings.HOLD_COMPLIANCE_MIN_DAYS = min_days
    fleet = build_fleet()
    olga = make_person("olga", "operator")
    events = AuditEvent.objects.count()
    with time_machine.travel(NOW, tick=False):
        place = functools.partial(
            services.hold,
            run=fleet.run,
            reason="regulator's order",
            case_ref="SEC-1",
            mode=HoldMode.COMPLIANCE,
            retain_until=NOW + ahead,
            actor=as_ui(olga),
        )
        if allowed:
            assert place().retain_until == NOW + ahead
            return
        with pytest.raises(DomainError, match=f"at least {min_days} day"):
            place()
    assert not Hold.objects.exists() and AuditEvent.objects.count() == events
    report(f"compliance hold {ahead} ahead, minimum {min_days} day(s)", "refused")


def test_the_api_refuses_a_compliance_hold_of_seventy_seconds(signed_in_as):
    client = signed_in_as("operator")
    run = RunFactory()
    with time_machine.travel(NOW, tick=False):
        response = client.post(
            "/api/v1/actions/holds/",
            {
                "run": run.pk,
                "reason": "r",
                "case_ref": "SEC-2",
                "mode": "compliance",
                "retain_until": (NOW + timedelta(seconds=70)).isoformat(),
            },
            content_type="application/json",
        )
    assert response.status_code == 400, response.content
    assert "at least 1 day ahead" in response.json()["detail"]
    assert not Hold.objects.exists()


# --- a Content-Security-Policy without inline scripts --------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/(?:ld\+)?json\")[^>]*>", re.IGNORECASE)
INLINE_HANDLER = re.compile(r"<[^>]+\son[a-z]+\s*=", re.IGNORECASE)
JAVASCRIPT_URL = re.compile(r"(?:href|src|action)\s*=\s*[\"']?\s*javascript:", re.IGNORECASE)


def test_every_response_carries_a_policy_that_allows_no_inline_script(client, signed_in):
    """On main no response had a Content-Security-Policy."""
    checked = 0
    for who, path in (
        (client, "/accounts/login/"),
        (signed_in, "/runs/"),
        (signed_in, "/api/v1/runs/"),
        (client, "/healthz/"),
    ):
        policy = who.get(path)["Content-Security-Policy"]
        directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
        assert directives["script-src"] == "'self'", policy
        assert directives["object-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
        checked += 1
    report("responses with a Content-Security-Policy, script-src 'self'", checked)


def test_no_template_has_an_inline_script_or_event_handler():
    templates = [*ROOT.glob("templates/**/*.html"), *ROOT.glob("*/templates/**/*.html")]
    found = []
    for path in templates:
        text = path.read_text()
        for pattern in (INLINE_SCRIPT, INLINE_HANDLER, JAVASCRIPT_URL):
            found += [f"{path.relative_to(ROOT)}: {m.group(0)[:80]}" for m in pattern.finditer(text)]
    assert templates and found == []
    report("templates without inline scripts or handlers", len(templates))
