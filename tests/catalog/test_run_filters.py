"""The runs list's filters and sort orders, the same on the page and in the API."""

from __future__ import annotations

import pytest

from catalog.choices import CopyState, Importance, RunStatus
from catalog.models import CopyTierUsage
from catalog.run_filters import RunFilters
from tests.catalog.test_views import make_copy, make_location, make_run
from tests.conftest import queries_for

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
