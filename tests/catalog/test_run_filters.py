"""The runs list's filters and sort orders, the same on the page and in the API."""

from __future__ import annotations

import re

import pytest

from catalog.choices import CopyState, Importance, RunStatus
from catalog.models import CopyTierUsage, Run, Team
from dashboard.run_filters import SORTS, BadCursor, Cursor, RunFilters
from tests.conftest import queries_for
from tests.helpers.catalog import make_copy, make_location, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs():
    nvme = make_location("gpu-a01")
    big = make_run("vision", "vit-huge")
    make_copy(big, 100, nvme, files=4, size=1024**3)
    broken = make_run("speech", "whisper")
    make_copy(broken, 10, nvme, state=CopyState.PARTIAL, reasons=["rank 1 missing"])
    make_copy(broken, 20, nvme)
    done = make_run("vision", "resnet")
    done.status = RunStatus.FINISHED
    done.save()
    old = make_copy(done, 5, nvme, files=1, size=1024)
    CopyTierUsage.objects.create(copy=old, location=nvme, tier="nvme", storage_class="", bytes=1024, files=1)
    critical = old.checkpoint
    critical.importance = Importance.CRITICAL
    critical.save()
    return {"big": big, "broken": broken, "done": done}


def names(queryset) -> list[str]:
    return [r.name for r in queryset]


def test_each_filter_narrows_the_list(runs):
    assert names(RunFilters.from_params({}).apply()) == ["whisper", "resnet", "vit-huge"]
    assert names(RunFilters.from_params({"status": "finished"}).apply()) == ["resnet"]
    assert names(RunFilters.from_params({"attention": "1"}).apply()) == ["whisper"]
    assert names(RunFilters.from_params({"tier": "nvme"}).apply()) == ["resnet"]
    assert names(RunFilters.from_params({"tier": "archive"}).apply()) == []
    # A critical checkpoint with one unverified copy is under-replicated.
    assert names(RunFilters.from_params({"flag": "under_replicated"}).apply()) == ["resnet"]
    assert names(RunFilters.from_params({"q": "VIT", "team": str(runs["big"].team_id)}).apply()) == ["vit-huge"]


def test_sorts_order_the_list(runs):
    assert names(RunFilters.from_params({"sort": "bytes"}).apply())[0] == "vit-huge"
    assert names(RunFilters.from_params({"sort": "name"}).apply()) == ["resnet", "vit-huge", "whisper"]
    assert names(RunFilters.from_params({"sort": "attention"}).apply())[0] == "whisper"
    assert names(RunFilters.from_params({"sort": "checkpoints"}).apply())[0] == "whisper"


def test_unknown_values_are_ignored_not_errors():
    f = RunFilters.from_params({"status": "<x>", "tier": "tape", "flag": "x", "sort": "; drop", "team": "-3"})
    assert f == RunFilters()
    assert not f.narrowed and f.query() == ""
    assert (
        RunFilters.from_params({"status": "active", "sort": "bytes"}).query(page=2) == "status=active&sort=bytes&page=2"
    )


def test_the_page_offers_the_filters_and_keeps_them(signed_in, runs):
    page = signed_in.get("/runs/?status=finished&sort=bytes").content.decode()
    assert "resnet" in page and "whisper" not in page
    assert '<option value="finished" selected>' in page and '<option value="bytes" selected>' in page
    empty = signed_in.get("/runs/?tier=deep_archive").content.decode()
    assert "No run matches" in empty and "with bytes on deep_archive" in empty


def test_the_api_takes_the_same_filters(signed_in, runs):
    data = signed_in.get("/api/v1/runs/", {"attention": "1"}).json()
    assert [r["name"] for r in data["results"]] == ["whisper"]
    data = signed_in.get("/api/v1/runs/", {"tier": "nvme", "status": "finished"}).json()
    assert [r["name"] for r in data["results"]] == ["resnet"]


def test_filtering_does_not_add_queries_per_run(signed_in, runs):
    first = queries_for(signed_in, "/runs/?flag=under_replicated&tier=nvme&attention=1&sort=newest")
    nvme = make_location("gpu-b02")
    for i in range(6):
        make_copy(make_run("nlp", f"bert-{i}"), 1, nvme)
    assert queries_for(signed_in, "/runs/?flag=under_replicated&tier=nvme&attention=1&sort=newest") == first


# --- keyset pages -----------------------------------------------------------------------------------


@pytest.fixture
def many_runs():
    """23 runs with ties on every sort key: equal names in two teams, equal bytes, steps and counts, and
    runs with no present copy (no bytes, no step), which sort last as NULLS LAST does."""
    nvme = make_location("gpu-k01")
    made = []
    for i in range(23):
        run = make_run(["vision", "speech", "nlp"][i % 3], f"run-{i % 8:02d}")
        made.append(run)
        if i % 5 == 4:
            continue  # no copy at all
        make_copy(
            run, 10 * (i % 4), nvme, files=1 + i % 3, size=1024, state=CopyState.PARTIAL if i % 7 == 0 else "complete"
        )
        if i % 2:
            make_copy(run, 500, nvme, files=1, size=1024)
    Run.objects.filter(pk__in=[r.pk for r in made[::4]]).update(status=RunStatus.FINISHED)
    return made


def walk(filters: RunFilters, runs, *, size: int) -> list[list[int]]:
    """Every page from the start, following ``next``."""
    pages = [filters.page(runs, size=size)]
    while pages[-1].next is not None:
        assert len(pages) < 50
        pages.append(filters.page(runs, cursor=pages[-1].next, size=size))
    return [[r.pk for r in p.runs] for p in pages]


@pytest.mark.parametrize("sort", list(SORTS))
@pytest.mark.parametrize("params", [{}, {"status": "active"}, {"attention": "1"}, {"q": "run-0"}])
def test_keyset_pages_cover_every_run_once_in_the_sort_order(many_runs, sort, params):
    filters = RunFilters.from_params({**params, "sort": sort})
    want = [r.pk for r in filters.apply()]
    assert want  # every case lists some runs
    runs = Run.objects.all()
    pages = walk(filters, runs, size=4)
    assert [pk for page in pages for pk in page] == want
    assert all(len(page) == 4 for page in pages[:-1])
    # Numbers and positions as the page shows them.
    assert filters.page(runs, cursor=None, size=4).count == len(want)
    # And back from the last page by ``previous``: the same pages in reverse.
    page = filters.page(runs, cursor=filters.page(runs, size=4).next, size=4) if len(pages) > 1 else None
    if page is not None:
        assert page.before == 4 and page.number == 2 and page.start_index == 5
        last = filters.page(runs, size=4)
        for _ in range(len(pages) - 1):
            last = filters.page(runs, cursor=last.next, size=4)
        back = [[r.pk for r in last.runs]]
        while last.previous is not None:
            last = filters.page(runs, cursor=last.previous, size=4)
            back.append([r.pk for r in last.runs])
        assert back[::-1] == pages
        assert last.before == 0 and last.number == 1


def test_a_cursor_keeps_its_place_when_runs_are_added_before_it(many_runs):
    filters = RunFilters()
    first = filters.page(Run.objects.all(), size=5)
    second = [r.pk for r in filters.page(Run.objects.all(), cursor=first.next, size=5).runs]
    make_run("aaa-first-team", "new")
    again = filters.page(Run.objects.all(), cursor=filters.cursor(first.next.encode()), size=5)
    assert [r.pk for r in again.runs] == second
    assert again.before == 6  # the new run is counted ahead of the page


def test_a_cursor_of_another_sort_or_garbage_is_refused():
    cursor = Cursor("bytes", (10, "team", "run"), 3).encode()
    assert RunFilters.from_params({"sort": "bytes"}).cursor(cursor).key == (10, "team", "run")
    for token in (cursor, "not-base64!", "e30", Cursor("team", ("a", "b"), 1).encode()[:-3]):
        with pytest.raises(BadCursor):
            RunFilters.from_params({"sort": "name"}).cursor(token)
    with pytest.raises(BadCursor):  # right sort, wrong types
        RunFilters.from_params({"sort": "bytes"}).cursor(Cursor("bytes", ("10", "t", "r"), 3).encode())


def _links(html: str) -> dict[str, str]:
    return {rel: href.replace("&amp;", "&") for href, rel in re.findall(r'href="([^"]*)" rel="(next|prev)"', html)}


def test_the_page_follows_next_and_previous_links_with_the_filters_kept(signed_in, many_runs):
    filters = RunFilters.from_params({"status": "active", "sort": "bytes"})
    want = [r.name for r in filters.apply()]
    url = "/runs/?status=active&sort=bytes"
    seen: list[str] = []
    pages = []
    while url:
        html = signed_in.get(url).content.decode()
        pages.append(url)
        seen += re.findall(r"<strong>([^<]+)</strong></a></td>", html)
        links = _links(html)
        url = f"/runs/{links['next']}" if "next" in links else None
        if url:
            assert "status=active" in url and "sort=bytes" in url and "cursor=" in url
    # 50 runs a page: the fixture fits on one; the shape of the walk is what counts here.
    assert seen == want


def test_the_page_walks_a_long_list_by_cursor_and_back(signed_in):
    team = Team.objects.create(name="nlp")
    Run.objects.bulk_create(Run(team=team, name=f"run-{i:03d}") for i in range(120))
    first = signed_in.get("/runs/?q=run-").content.decode()
    assert "Page 1 of 3" in first and "1\N{EN DASH}50 of 120 runs" in first
    second_url = "/runs/" + _links(first)["next"]
    second = signed_in.get(second_url).content.decode()
    assert "Page 2 of 3" in second and "51\N{EN DASH}100 of 120 runs" in second
    assert "run-050" in second and "run-049" not in second and "run-100" not in second
    third = signed_in.get("/runs/" + _links(second)["next"]).content.decode()
    assert "run-119" in third and "Next →</span>" in third
    back = signed_in.get("/runs/" + _links(third)["prev"]).content.decode()
    assert "Page 2 of 3" in back and "run-050" in back and "run-099" in back
    # The link is bookmarkable: the same URL opens the same page again.
    assert signed_in.get(second_url).content.decode().count("run-0") == second.count("run-0")
    # A broken cursor opens the start rather than an error.
    assert "Page 1 of 3" in signed_in.get("/runs/?q=run-&cursor=garbage").content.decode()


def test_a_keyset_page_costs_as_many_queries_as_the_first_and_with_more_runs(signed_in, many_runs):
    first_html = signed_in.get("/runs/?sort=checkpoints").content.decode()
    first = queries_for(signed_in, "/runs/?sort=checkpoints")
    team = Team.objects.create(name="zz")
    Run.objects.bulk_create(Run(team=team, name=f"more-{i:03d}") for i in range(80))
    html = signed_in.get("/runs/?sort=checkpoints").content.decode()
    assert first_html != html
    assert queries_for(signed_in, "/runs/?sort=checkpoints") == first
    later = "/runs/" + _links(html)["next"]
    # A cursor's page also counts the runs ahead of it: one more query, whatever the number of runs.
    assert queries_for(signed_in, later) == first + 1
    Run.objects.bulk_create(Run(team=team, name=f"most-{i:03d}") for i in range(80))
    assert queries_for(signed_in, later) == first + 1


def test_the_api_pages_by_the_same_cursor_in_the_same_order(signed_in, many_runs):
    filters = RunFilters.from_params({"sort": "newest"})
    want = [r.pk for r in filters.apply()]
    url = "/api/v1/runs/?sort=newest&page_size=5"
    got: list[int] = []
    while url:
        body = signed_in.get(url).json()
        assert body["count"] == len(want)
        got += [r["id"] for r in body["results"]]
        url = body["next"]
        assert len(got) <= len(want)
    assert got == want
    last = signed_in.get(
        f"/api/v1/runs/?sort=newest&page_size=5&cursor={filters.page(Run.objects.all(), size=5).next.encode()}"
    ).json()
    assert [r["id"] for r in signed_in.get(last["previous"]).json()["results"]] == want[:5]
    refused = signed_in.get("/api/v1/runs/?sort=name&cursor=" + filters.page(Run.objects.all(), size=5).next.encode())
    assert refused.status_code == 400 and refused.json()["error"] == "bad_cursor"
