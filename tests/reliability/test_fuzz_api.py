"""schemathesis over the API's own OpenAPI schema against a live server, signed in with a person's token that
holds every role: no request may get a 5xx.

The smoke (every ``make test``) sends a few hundred requests; the long run (``make test-reliability``) sends
tens of thousands. Each prints how many requests it fuzzed. A failure prints schemathesis' report: the
operation, the request that got the 5xx and a curl line to repeat it.

The schema is written by drf-spectacular in-process (the same as ``/api/v1/schema/``) and the live server
serves the test database, with a little data so that ids in paths sometimes name real objects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml
from drf_spectacular.generators import SchemaGenerator

from access.services import api_token_create
from audit.actor import Actor
from fleet.services import host_register, host_token_issue, location_add
from tests.conftest import give_roles
from tests.factories import CheckpointCopyFactory, CheckpointFactory, RunFactory
from tests.reliability.conftest import report


@pytest.fixture
def token(transactional_db, django_user_model) -> str:
    person = django_user_model.objects.create_user(username="fuzzer", password="a-long-password-1")
    give_roles(person, "admin")
    _, raw = api_token_create(user=person, actor=Actor.command(label="tests"))
    run = RunFactory(pk=1)
    CheckpointCopyFactory(checkpoint=CheckpointFactory(pk=1, run=run))
    return raw


@pytest.fixture
def host_token(transactional_db) -> str:
    actor = Actor.command(label="tests")
    host = host_register(name="gpu-fuzz", actor=actor)
    location_add(host=host, name="gpu-fuzz:/ckpt", kind="nvme", tier="nvme", root_path="/ckpt", actor=actor)
    return host_token_issue(host=host, actor=actor)


def fuzz(live_server, token: str, tmp_path: Path, *, examples: int, phases: str, seed: int, only: str = "") -> int:
    """Run schemathesis; fail on any 5xx or any error it hits but one: return how many requests it sent.

    The one error let through is a "Network Error" in which the test server (Django's, on Python's
    http.server) read bytes the client left on a kept-alive connection as the next request and answered in
    HTTP/0.9 ("Connection aborted. <!DOCTYPE HTML>"): a framing quirk of that server with the odd methods
    and bodies of the coverage phase, not an answer of the application. It is counted and printed.
    """
    schema = tmp_path / "openapi.yaml"
    schema.write_text(yaml.safe_dump(SchemaGenerator().get_schema(request=None, public=True)))
    har, junit = tmp_path / "requests.har", tmp_path / "junit.xml"
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        str(schema),
        f"--url={live_server.url}",
        f"--header=Authorization: Bearer {token}",
        # One connection per request: the test server (Django's, on Python's http.server) can misread bytes a
        # coverage-phase request left on a kept-alive connection as the next request (see below).
        "--header=Connection: close",
        "--checks=not_a_server_error",
        f"--phases={phases}",
        f"--max-examples={examples}",
        f"--seed={seed}",
        "--workers=1",
        "--request-timeout=60",
        "--generation-database=none",
        "--no-shrink",
        "--no-color",
        "--suppress-health-check=all",
        "--report=har,junit",
        f"--report-har-path={har}",
        f"--report-junit-path={junit}",
        "--warnings=off",
        # The inventory upload is gzip NDJSON, which schemathesis cannot write; tests/fleet/test_ingest.py and
        # the input-abuse tests try it.
        "--exclude-path-regex=^/api/v1/inventories/$",
        *([f"--include-path-regex={only}"] if only else []),
    ]
    # In tmp_path: schemathesis keeps a cache (.schemathesis/) in its working directory.
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600, env={**os.environ}, cwd=tmp_path)
    sent = len(json.loads(har.read_text())["log"]["entries"]) if har.exists() else 0
    report(f"API requests fuzzed{' (' + only + ')' if only else ''} (schemathesis, 0 server errors allowed)", sent)
    output = done.stdout[-20000:] + done.stderr[-5000:]
    assert junit.exists(), output
    cases = list(ElementTree.parse(junit).getroot().iter("testcase"))
    failures = [(case.get("name"), f.get("message")) for case in cases for f in case.iter("failure")]
    # The error's words are in its message attribute or, for some errors, only in its text.
    errors = [
        (case.get("name"), (e.get("message") or "") + (e.text or "")) for case in cases for e in case.iter("error")
    ]
    framing = [e for e in errors if "Connection aborted. <!DOCTYPE HTML>" in e[1]]
    if framing:
        report("test-server framing errors (not application answers)", framing)
    assert failures == [], output
    assert [e for e in errors if e not in framing] == [], output
    assert done.returncode == 0 or errors, output
    assert sent > 0, output
    return sent


def test_a_short_fuzz_of_every_api_operation_gets_no_server_error(live_server, token, tmp_path):
    assert fuzz(live_server, token, tmp_path, examples=5, phases="examples,fuzzing", seed=15) >= 200


def test_a_short_fuzz_of_the_agent_endpoints_with_a_host_token_gets_no_server_error(live_server, host_token, tmp_path):
    # The agent's four operations; the coverage phase tries their bodies' boundary values.
    sent = fuzz(
        live_server,
        host_token,
        tmp_path,
        examples=25,
        phases="examples,coverage,fuzzing",
        seed=15,
        only="^/api/v1/agent/",
    )
    assert sent >= 20


@pytest.mark.reliability_long
def test_a_long_fuzz_of_every_api_operation_gets_no_server_error(live_server, token, tmp_path):
    # The coverage phase alone sends about 4,000 requests (boundary values of every parameter and body field).
    fuzz(live_server, token, tmp_path, examples=100, phases="examples,coverage,fuzzing", seed=1515)
