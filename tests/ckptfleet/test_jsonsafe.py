"""ckptfleet.jsonsafe and the API's parser: deep nesting and NUL are refused as bad input, never a 500."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actions.models import Pin
from audit.models import AuditEvent
from ckptfleet import jsonsafe
from tests.factories import CheckpointFactory


def nested(levels: int, inner: str = "1") -> str:
    return "[" * levels + inner + "]" * levels


def test_it_reads_ordinary_documents_as_json_does():
    text = '{"a": [1, {"b": [true, null, "x"]}], "c": 1.5}'
    assert jsonsafe.loads(text) == json.loads(text)
    assert jsonsafe.loads(nested(jsonsafe.MAX_DEPTH)) == json.loads(nested(jsonsafe.MAX_DEPTH))


@pytest.mark.parametrize("levels", [jsonsafe.MAX_DEPTH + 1, 900, 5_000, 200_000])
def test_it_refuses_nesting_past_the_bound_at_any_depth(levels):
    with pytest.raises(jsonsafe.JsonTooDeep, match="deeper than 64"):
        jsonsafe.loads(nested(levels))
    with pytest.raises(ValueError):  # every caller's "not valid JSON" path takes it
        jsonsafe.loads(('{"k":' * levels) + "1" + "}" * levels)


def test_many_shallow_containers_are_not_deep():
    text = json.dumps([[i, {"x": [i]}] for i in range(10_000)])
    assert len(jsonsafe.loads(text)) == 10_000


def test_nul_is_refused_only_when_asked_and_only_when_real():
    assert jsonsafe.loads('{"a": "x\\u0000y"}') == {"a": "x\x00y"}
    with pytest.raises(jsonsafe.JsonHasNul):
        jsonsafe.loads('{"a": "x\\u0000y"}', refuse_nul=True)
    with pytest.raises(jsonsafe.JsonHasNul):
        jsonsafe.loads('{"x\\u0000": 1}', refuse_nul=True)
    assert jsonsafe.loads('{"a": "\\\\u0000"}', refuse_nul=True) == {"a": "\\u0000"}  # a backslash, then text


def test_nan_is_refused_unless_allowed():
    with pytest.raises(ValueError, match="NaN"):
        jsonsafe.loads("[NaN]")
    assert jsonsafe.loads("[1]", allow_nan=True) == [1]


@given(st.recursive(st.none() | st.integers() | st.text(), lambda c: st.lists(c) | st.dictionaries(st.text(), c)))
def test_depth_agrees_with_a_recursive_count(value):
    def rec(v):
        if isinstance(v, dict):
            return 1 + max(map(rec, v.values()), default=0)
        if isinstance(v, list):
            return 1 + max(map(rec, v), default=0)
        return 0

    assert jsonsafe.depth(value) == rec(value)


# --- through the API, on the real database ------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        nested(100_000),  # was a RecursionError: HTTP 500
        '{"checkpoint": 1, "reason": ' + nested(70, '"x"') + "}",
        '{"checkpoint": 1, "reason": "a\\u0000b"}',  # was a PostgreSQL DataError: HTTP 500
        '{"checkpoint": NaN}',
    ],
    ids=["100000-deep", "70-deep-in-a-field", "nul-in-a-string", "nan"],
)
def test_an_api_write_with_a_hostile_body_is_a_400_and_changes_nothing(signed_in_as, body):
    checkpoint = CheckpointFactory()
    client = signed_in_as("operator")
    body = body.replace('"checkpoint": 1', f'"checkpoint": {checkpoint.pk}')
    before = AuditEvent.objects.count()
    response = client.post("/api/v1/actions/pins/", data=body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "parse_error"
    assert not Pin.objects.exists()
    assert AuditEvent.objects.count() == before
    # The same person's ordinary request is taken.
    ok = client.post(
        "/api/v1/actions/pins/", {"checkpoint": checkpoint.pk, "reason": "x"}, content_type="application/json"
    )
    assert ok.status_code == 201, ok.content
