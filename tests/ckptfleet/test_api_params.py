"""Unknown query parameters on the API's reads are a 400 that names them; declared ones still work."""

from __future__ import annotations

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from ckptfleet.api_params import declared_query_parameters
from tests.factories import RunFactory, TeamFactory


def test_an_unknown_filter_is_a_400_naming_it_and_the_known_ones(signed_in):
    answer = signed_in.get("/api/v1/runs/?tem=llm")
    assert answer.status_code == 400
    body = answer.json()
    assert body["error"] == "bad_parameter"
    assert body["detail"].startswith("Unknown query parameter: tem. Known: ")
    for known in ("attention", "cursor", "format", "page_size", "q", "sort", "status", "team", "tier"):
        assert known in body["detail"]


def test_several_unknown_parameters_are_all_named(signed_in):
    detail = signed_in.get("/api/v1/checkpoints/?bogus=1&run=1&other=2").json()["detail"]
    assert detail.startswith("Unknown query parameters: bogus, other. Known: ")


def test_a_detail_view_takes_no_list_filters(signed_in):
    run = RunFactory()
    assert signed_in.get(f"/api/v1/runs/{run.pk}/").status_code == 200
    assert signed_in.get(f"/api/v1/runs/{run.pk}/?format=json").status_code == 200
    refused = signed_in.get(f"/api/v1/runs/{run.pk}/?status=active")
    assert refused.status_code == 400
    assert "Unknown query parameter: status" in refused.json()["detail"]


def test_declared_parameters_pagination_and_format_are_accepted(signed_in):
    run = RunFactory()
    for url in (
        "/api/v1/runs/?page_size=5&sort=name&format=json",
        f"/api/v1/checkpoints/?run={run.pk}&importance=routine&page_size=2",
        "/api/v1/orphans/?page=1&page_size=10&kind=unclaimed",
        "/api/v1/audit/?action=hold&page_size=1",
        "/api/v1/actions/holds/?active=true",
        "/api/v1/actions/pins/?active=1",
        "/api/v1/jobs/?kind=deletion&state=active",
    ):
        assert signed_in.get(url).status_code == 200, url


def test_writes_are_not_checked(signed_in):
    # A POST's query string is not a filter; only reads are checked.
    answer = signed_in.post("/api/v1/runs/status/?whatever=1", {}, content_type="application/json")
    assert answer.status_code != 500
    assert "Unknown query parameter" not in answer.content.decode()


def test_runs_filter_by_team_name_and_an_unknown_team_is_not_found(signed_in):
    llm, vision = TeamFactory(name="llm"), TeamFactory(name="vision")
    mine = RunFactory(team=llm, name="llama")
    RunFactory(team=vision, name="vit")
    by_name = signed_in.get("/api/v1/runs/?team=llm").json()
    assert [r["id"] for r in by_name["results"]] == [mine.pk]
    by_id = signed_in.get(f"/api/v1/runs/?team={llm.pk}").json()
    assert [r["id"] for r in by_id["results"]] == [mine.pk]
    missing = signed_in.get("/api/v1/runs/?team=nope")
    assert missing.status_code == 404
    assert "team 'nope' not found" in missing.json()["detail"]


def _api_views(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _api_views(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern) and prefix.startswith("api/v1/"):
            yield prefix + str(pattern.pattern), pattern.callback


@pytest.mark.django_db
def test_every_api_read_declares_its_parameters_to_the_check():
    """Each GET view of the API has a declared set (at least ``format``), the same the schema lists."""
    checked = {
        route: declared_query_parameters(callback, "GET") for route, callback in _api_views(get_resolver().url_patterns)
    }
    reads = {route: known for route, known in checked.items() if known is not None}
    assert len(reads) > 40
    assert all("format" in known for known in reads.values())
    assert {"root", "can"} <= reads["api/v1/agent/deletions/"]
    assert {"root", "after", "dry_run", "defer"} <= reads["api/v1/agent/offloads/"]
    assert checked["api/v1/schema/"] is None  # the schema view is not an operation of itself
