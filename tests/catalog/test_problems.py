"""The problems list: one row per problem of each kind, filters, sort, totals, CSV, API, scoping, and the defects
of the queues it replaces (the same copy in two queues, the same reason twice, numeric-only filters)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from catalog.choices import CopyState, Importance, RunStatus, Verification
from catalog.models import CheckpointCopy, ShardFile
from dashboard import problems
from dashboard.problems import Filters, Kind
from tests.conftest import give_roles, queries_for
from tests.helpers.placement import checkpoint, copy, host_location, make_run
from tests.helpers.usage import flat_prices

pytestmark = pytest.mark.django_db
GIB = 1024**3
MISMATCH_REASON = "model-00002.safetensors: sha256 differs from the one written at save time"


@pytest.fixture
def fleet(settings):
    """One item of every kind, in two teams."""
    settings.NVME_FINISHED_DAYS = 14
    flat_prices(nvme="0.10", standard="0.02")
    llm = make_run("llama-70b", team="llm")
    nvme = host_location("gpu-a01")
    other = host_location("gpu-a02")
    out = {"nvme": nvme, "run": llm}
    out["partial"] = copy(checkpoint(llm, 100), nvme, state=CopyState.PARTIAL, verification=Verification.UNVERIFIED,
                          size=2 * GIB)  # fmt: skip
    CheckpointCopy.objects.filter(pk=out["partial"].pk).update(
        reasons=["rank 3 of 4 is missing: __3_0.distcp"], judged_at=timezone.now() - timedelta(days=10)
    )
    corrupt = copy(checkpoint(llm, 200), nvme, state=CopyState.CORRUPT, verification=Verification.MISMATCH)
    # A checksum mismatch that made the copy corrupt is among both lists of reasons (catalog.verification).
    CheckpointCopy.objects.filter(pk=corrupt.pk).update(
        reasons=[MISMATCH_REASON], verification_reasons=[MISMATCH_REASON]
    )
    out["corrupt"] = corrupt
    ck = checkpoint(llm, 300)
    out["disputed"] = copy(ck, nvme, verification=Verification.DISPUTED)
    copy(ck, other, verification=Verification.DISPUTED)
    out["unverified"] = copy(checkpoint(llm, 400), other, verification=Verification.UNVERIFIED, size=3 * GIB)
    out["critical"] = checkpoint(llm, 500, Importance.CRITICAL)
    copy(out["critical"], nvme)
    ended = make_run("bert", status=RunStatus.FINISHED, team="speech")
    out["on_nvme"] = checkpoint(ended, 10, age_days=40)
    copy(out["on_nvme"], nvme, size=GIB)
    ShardFile.objects.create(
        location=nvme, path="llm/stray/file.bin", size=777, mtime=timezone.now() - timedelta(days=3),
        first_seen_at=timezone.now(), changed_at=timezone.now(),
    )  # fmt: skip
    return out


def kinds_of(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for p in rows:
        out.setdefault(p.kind, []).append(p)
    return out


def everything(user=None, **filters):
    return list(problems.all_problems(Filters(**filters), user))


def test_every_kind_is_listed_once_with_its_reason_since_bytes_cost_and_fix(fleet):
    rows = kinds_of(everything())
    # Wrong resume pointers need real framework trees: tests/catalog/test_pointers.py lists them; an ownership
    # conflict, a protected copy whose files name another checkpoint: test_an_ownership_conflict_is_listed below; a
    # newest checkpoint on a down host: tests/catalog/test_host_down_event.py; an unproven reclaim: test_reclaim.py.
    assert set(rows) == set(Kind.values) - {Kind.POINTER, Kind.CONFLICT, Kind.HOST_DOWN, Kind.RECLAIM}
    partial = rows[Kind.PARTIAL][0]
    assert partial.copy_id == fleet["partial"].pk and partial.bytes == 2 * GIB
    assert partial.reasons == ["rank 3 of 4 is missing: __3_0.distcp"]
    assert partial.age_days == 10 and partial.cost == Decimal("0.2000")  # 2 GiB x 0.10 per GiB-month
    assert partial.action_url.startswith("/fleet/")
    assert [p.copy_id for p in rows[Kind.CORRUPT]] == [fleet["corrupt"].pk]
    assert "/delete/?copy=" in rows[Kind.CORRUPT][0].action_url
    assert [p.copy_id for p in rows[Kind.DISPUTED]] == [fleet["disputed"].pk, fleet["disputed"].pk + 1]
    assert [p.copy_id for p in rows[Kind.UNVERIFIED]] == [fleet["unverified"].pk]
    assert rows[Kind.UNVERIFIED][0].cost == Decimal("0.3000")
    flags = {(p.flag, p.checkpoint_id) for p in rows[Kind.UNDER_REPLICATED]}
    assert ("under_replicated", fleet["critical"].pk) in flags
    assert rows[Kind.UNDER_REPLICATED][0].action_url.endswith("/promote/")
    critical = next(
        p
        for p in rows[Kind.UNDER_REPLICATED]
        if (p.flag, p.checkpoint_id) == ("under_replicated", fleet["critical"].pk)
    )
    assert critical.reasons == [
        "Too few verified copies in distinct failure domains",
        "1 verified copy, all in host gpu-a01",
    ]
    misplaced = rows[Kind.MISPLACED]
    assert [(p.flag, p.checkpoint_id) for p in misplaced] == [("finished_on_nvme", fleet["on_nvme"].pk)]
    assert misplaced[0].bytes == GIB and misplaced[0].cost == Decimal("0.1000") and "/move/" in misplaced[0].action_url
    orphan = rows[Kind.ORPHANED][0]
    assert orphan.bytes == 777 and orphan.age_days == 3 and "/actions/orphans/cleanup/" in orphan.action_url


def test_a_copy_made_corrupt_by_a_checksum_mismatch_is_one_row_that_says_its_reason_once(fleet):
    rows = [p for p in everything() if p.copy_id == fleet["corrupt"].pk]
    assert [p.kind for p in rows] == [Kind.CORRUPT]
    assert rows[0].reasons == [MISMATCH_REASON]


def test_the_corrupt_and_checksum_queues_no_longer_list_the_same_copy(fleet, signed_in):
    corrupt = signed_in.get("/queue/copies/?kind=corrupt").context["copies"]
    assert [c.pk for c in corrupt] == [fleet["corrupt"].pk]
    # The old queue of checksum mismatches is the corrupt queue: one list, each copy once.
    assert signed_in.get("/queue/copies/?kind=mismatch").context["kind"] == "corrupt"
    labels = [label for _, label in signed_in.get("/queue/copies/").context["queues"]]
    assert "Copies whose checksums disagree" not in labels


def test_the_copy_queue_says_a_reason_once(fleet, signed_in):
    page = signed_in.get("/queue/copies/?kind=corrupt").content.decode()
    assert page.count(MISMATCH_REASON) == 1


def test_filters_by_kind_team_run_location_and_age(fleet):
    assert {p.kind for p in everything(kind=Kind.PARTIAL)} == {Kind.PARTIAL}
    speech = fleet["on_nvme"].run.team_id
    # The finished run's one checkpoint: on NVMe, and its newest restorable one, on one host only.
    assert {(p.kind, p.flag) for p in everything(team_id=speech)} == {
        (Kind.MISPLACED, "finished_on_nvme"),
        (Kind.UNDER_REPLICATED, "newest_on_one_host"),
    }
    assert {p.run_id for p in everything(run_id=fleet["run"].pk)} == {fleet["run"].pk}
    other = everything(location_id=fleet["unverified"].location_id)
    assert {p.copy_id for p in other if p.subject == "copy"} == {fleet["unverified"].pk, fleet["disputed"].pk + 1}
    old = everything(min_age_days=7)
    assert {p.kind for p in old} == {Kind.PARTIAL, Kind.MISPLACED, Kind.UNDER_REPLICATED}
    assert all(p.age_days >= 7 for p in old)


def test_sorted_by_bytes_cost_or_age_across_kinds(fleet):
    by_bytes = [p.bytes for p in everything(sort="-bytes")]
    assert by_bytes == sorted(by_bytes, reverse=True)
    costs = [p.cost for p in everything(sort="cost") if p.cost is not None]
    assert costs == sorted(costs)
    ages = [p.since for p in everything(sort="age")]
    assert ages == sorted(ages)


def test_a_page_reads_the_same_rows_as_the_whole_list_in_pages(fleet):
    whole = [p.key for p in everything(sort="-bytes")]
    pages = [problems.problem_page(Filters(sort="-bytes"), None, number=n, size=3) for n in (1, 2, 3, 4)]
    assert [p.key for page in pages for p in page.rows] == whole
    assert pages[0].count == len(whole) and pages[0].pages == (len(whole) + 2) // 3


def test_the_page_shows_totals_rows_and_links_each_row_to_its_fix(fleet, signed_in):
    page = signed_in.get("/problems/").content.decode()
    assert "Under-replicated" in page and "Misplaced" in page and "Orphaned" in page
    assert "Export CSV" in page and "Move off NVMe" in page and "Delete copy" in page
    assert page.count(MISMATCH_REASON) == 1
    filtered = signed_in.get("/problems/?kind=partial&team=llm&run=llm/llama-70b&age=7").content.decode()
    assert "rank 3 of 4 is missing" in filtered and MISMATCH_REASON not in filtered


def test_bad_filters_are_refused_plainly(fleet, signed_in):
    for query in ("kind=tape", "sort=name", "team=nobody", "run=llm/none", "location=nowhere", "age=-1", "page=x"):
        response = signed_in.get(f"/problems/?{query}")
        assert response.status_code == 400, query
        assert signed_in.get(f"/api/v1/problems/?{query}").status_code == 400, query


def test_an_empty_fleet_says_there_is_nothing(signed_in):
    page = signed_in.get("/problems/").content.decode()
    assert "No problems" in page


def test_the_csv_has_the_same_rows_with_exact_bytes_and_cost_and_a_dated_name(fleet, signed_in):
    response = signed_in.get("/problems/export.csv?sort=-bytes")
    assert response["Content-Disposition"].startswith('attachment; filename="problems-20')
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [r["kind"] for r in rows] == [p.kind for p in everything(sort="-bytes")]
    partial = next(r for r in rows if r["kind"] == "partial")
    assert partial["bytes"] == str(2 * GIB) and partial["cost_per_month"] == "0.2000"
    assert partial["currency"] and partial["since_utc"] and partial["age_days"] == "10"


def test_the_api_pages_with_the_same_filters_and_totals(fleet, signed_in):
    body = signed_in.get("/api/v1/problems/?page_size=2&sort=-bytes").json()
    assert body["count"] == len(everything()) and len(body["results"]) == 2 and body["pages"] > 1
    assert body["results"][0]["bytes"] == 3 * GIB and body["results"][0]["cost_per_month"] == "0.3000"
    assert {t["kind"] for t in body["totals"]} == set(Kind.values)
    only = signed_in.get(f"/api/v1/problems/?kind=misplaced&team={fleet['on_nvme'].run.team_id}").json()
    assert [r["checkpoint"] for r in only["results"]] == [fleet["on_nvme"].pk]
    schema = signed_in.get("/api/v1/schema/?format=json").json()
    assert "Problems" in schema["paths"]["/api/v1/problems/"]["get"]["summary"]


def test_a_scoped_person_sees_only_their_teams_problems(fleet, settings, signed_in_as):
    settings.CKPTFLEET_TEAM_SCOPING = True
    client = signed_in_as("viewer")
    give_roles(client.user, "team:speech")
    body = client.get("/api/v1/problems/").json()
    # No orphan of no run, no other team's copy.
    assert {r["kind"] for r in body["results"]} == {"misplaced", "under_replicated"}
    assert client.get("/problems/?team=llm").status_code == 400
    rows = list(csv.DictReader(io.StringIO(b"".join(client.get("/problems/export.csv").streaming_content).decode())))
    assert {r["team"] for r in rows} == {"speech"}


def test_the_overview_links_its_queues_into_the_problems_list(fleet, signed_in):
    page = signed_in.get("/").content.decode()
    assert 'href="/problems/?kind=partial"' in page and 'href="/problems/?kind=orphaned"' in page
    assert 'href="/problems/?kind=misplaced"' in page and 'href="/problems/?kind=under_replicated"' in page


def test_the_page_makes_the_same_number_of_queries_whatever_the_rows(fleet, signed_in):
    before = queries_for(signed_in, "/problems/")
    for step in range(600, 620):
        copy(checkpoint(fleet["run"], step), fleet["nvme"], state=CopyState.PARTIAL, verification="unverified")
    assert queries_for(signed_in, "/problems/") == before


def test_an_ownership_conflict_is_listed_with_its_reason_and_where_to_settle_it(fleet):
    """The ingest kept a held copy on its checkpoint although its files now name another run (catalog.services)."""
    why = "Ownership conflict: the files now say this copy belongs to llm/decoy step 400 (checkpoint 9), but ..."
    unverified = fleet["unverified"]
    CheckpointCopy.objects.filter(pk=unverified.pk).update(reasons=[why])
    rows = everything(kind=Kind.CONFLICT)
    assert [(r.kind, r.copy_id, r.reasons, r.action_label) for r in rows] == [
        (Kind.CONFLICT, unverified.pk, [why], "Settle")
    ]
    assert rows[0].action_url.endswith(f"#copy-{unverified.pk}") and rows[0].key == f"conflict-{unverified.pk}"
    # Still listed under its own kind too: the conflict is about who owns it, not about its content.
    assert unverified.pk in [r.copy_id for r in everything(kind=Kind.UNVERIFIED)]
