"""Bad request input is a clear 4xx that changes nothing: NUL characters (ckptfleet.middleware), numbers and ids
from the URL and query string (ckptfleet.params, ckptfleet.routers), a body over the limit (413).

These run on the suite's database: on PostgreSQL a NUL or an out-of-range id that reached a query was a
DataError, an HTTP 500.
"""

from __future__ import annotations

import json

import pytest

from actions.models import DeletionJob, Hold
from audit.models import AuditEvent
from tests.factories import CheckpointFactory, RunFactory


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/runs/?q=a%00b",
        "/api/v1/runs/?a%00=1",
        "/api/v1/checkpoints/?run=%00",
        "/api/v1/audit/?action=x%00",
        "/api/v1/runs%00/",
        "/runs/?q=a%00b",
        "/fleet/?q=%00",
        "/recovery/?q=%00",
    ],
)
def test_a_nul_in_the_path_or_a_query_parameter_is_a_400(signed_in, url):
    RunFactory()
    response = signed_in.get(url)
    assert response.status_code == 400, response.content
    assert b"NUL character" in response.content
    if url.startswith("/api/"):
        assert response.json()["error"] == "bad_request"


def test_a_nul_in_a_form_field_is_a_400_and_nothing_is_held(signed_in):
    run = RunFactory()
    before = AuditEvent.objects.count()
    response = signed_in.post(f"/actions/runs/{run.pk}/hold/", {"reason": "incident\x00", "case_ref": "INC-1"})
    assert response.status_code == 400
    assert b"form field 'reason' contains a NUL character" in response.content
    assert not Hold.objects.exists() and AuditEvent.objects.count() == before


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("/api/v1/checkpoints/flagged/?run=%C2%B9", "run"),  # "¹": str.isdigit() says yes, int() says no
        ("/api/v1/checkpoints/flagged/?run=99999999999999999999999", "run"),  # past bigint
        ("/api/v1/checkpoints/flagged/?run=%D9%A3", "run"),  # an Arabic-Indic 3: int() took it
        # The filterset's own filters (issue 26): django-filter read these as run 3 and step 3.
        ("/api/v1/checkpoints/?run=%D9%A3", "run"),  # Arabic-Indic 3
        ("/api/v1/checkpoints/?run=%EF%BC%93", "run"),  # full-width 3
        ("/api/v1/checkpoints/?run=%C2%B9", "run"),
        ("/api/v1/checkpoints/?step=%EF%BC%93", "step"),
        ("/api/v1/spend/?run=%C2%B9", "run"),
        ("/api/v1/spend/?team=1_0", "team"),
        ("/api/v1/orphans/?location=%C2%B2", "location"),
        ("/api/v1/actions/deletions/preview/?checkpoint=%C2%B9", "checkpoint"),
        ("/api/v1/actions/deletions/preview/?checkpoint=1&copy=%20", "copy"),
        ("/api/v1/runs/1/placement/?limit=%C2%B9", "limit"),
        ("/api/v1/runs/?page_size=%C2%B9", "page_size"),
    ],
)
def test_a_number_that_is_not_ascii_digits_is_a_400_naming_the_parameter(signed_in, url, name):
    run = RunFactory(pk=1)
    CheckpointFactory(pk=1, run=run)
    response = signed_in.get(url)
    assert response.status_code == 400, response.content
    assert response.json()["error"] == "bad_parameter"
    assert response.json()["detail"].startswith(f"{name} must be")


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/runs/abc/placement/",  # was a ValueError in the query: HTTP 500
        "/api/v1/runs/%C2%B9/placement/",
        "/api/v1/runs/1.5/",
        "/api/v1/checkpoints/-1/",
        "/api/v1/actions/deletions/x/items/",
        "/api/v1/runs/99999999999999999999/",  # past what the route takes
    ],
)
def test_an_id_in_the_url_that_is_not_an_id_matches_no_route_and_is_a_json_404(signed_in, url):
    RunFactory(pk=1)
    response = signed_in.get(url)
    assert response.status_code == 404, response.content
    assert response.json()["error"] == "not_found"


def test_an_id_past_bigint_in_a_url_is_not_found(signed_in):
    # 19 digits match the route; PostgreSQL's bigint stops at 9223372036854775807.
    assert signed_in.get("/api/v1/runs/9999999999999999999/placement/").status_code == 404
    assert signed_in.get("/api/v1/inventories/99999999999999999999999/").status_code == 404
    assert signed_in.get("/runs/9999999999999999999/").status_code == 404


def test_a_page_with_a_bad_id_in_a_form_says_which_field(signed_in):
    run = RunFactory()
    response = signed_in.post(f"/actions/runs/{run.pk}/hold/", {"checkpoint": "¹", "reason": "r", "case_ref": "INC-1"})
    assert response.status_code == 400
    assert "checkpoint must be an id" in response.content.decode()
    assert not Hold.objects.exists()


def test_a_list_pages_filter_that_is_not_an_id_still_means_not_given(signed_in):
    RunFactory()
    for url in ("/runs/?team=%C2%B9", "/runs/?team=-3", "/fleet/?host=%C2%B9", "/placement/?run=%C2%B9"):
        assert signed_in.get(url).status_code == 200, url


def test_a_body_over_the_limit_is_a_413_before_any_view_reads_it(signed_in, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024
    checkpoint = CheckpointFactory()
    before = AuditEvent.objects.count()
    body = json.dumps({"checkpoint": checkpoint.pk, "reason": "x" * 2000})
    response = signed_in.post("/api/v1/actions/deletions/", data=body, content_type="application/json")
    assert response.status_code == 413
    assert response.json() == {
        "error": "too_large",
        "detail": f"the request body is {len(body)} bytes, over the limit of 1024 bytes",
    }
    assert not DeletionJob.objects.exists() and AuditEvent.objects.count() == before


def test_a_form_body_that_cannot_be_read_is_a_400(signed_in):
    run = RunFactory()
    response = signed_in.post(
        f"/actions/runs/{run.pk}/hold/",
        data=b"--x\r\nContent-Disposition: form-data; name=reason\r\n\r\nr\r\n--x--\r\n",
        content_type="multipart/form-data",  # no boundary
    )
    assert response.status_code == 400
    assert not Hold.objects.exists()
