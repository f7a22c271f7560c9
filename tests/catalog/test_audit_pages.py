"""The audit trail's pages: filters, keyset pages, CSV export, the API, histories and the chain's status."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.db import transaction

from audit.models import AuditEvent
from audit.services import audit_record
from catalog.models import Checkpoint, Run, Team
from tests.conftest import queries_for
from tests.helpers.audit import tamper


def record(
    action: str = "checkpoint.pin",
    *,
    at: datetime | None = None,
    actor: str = "ada",
    source: str = "ui",
    target_type: str = "checkpoint",
    target_id: int | None = 1,
    target_label: str = "vision/vit-huge step 100",
    **fields,
) -> AuditEvent:
    with transaction.atomic():
        if at is None:
            return audit_record(
                actor_kind="user",
                actor_label=actor,
                source=source,
                action=action,
                target_type=target_type,
                target_id=target_id,
                target_label=target_label,
                **fields,
            )
        with mock.patch("audit.services.timezone.now", return_value=at):
            return audit_record(
                actor_kind="user",
                actor_label=actor,
                source=source,
                action=action,
                target_type=target_type,
                target_id=target_id,
                target_label=target_label,
                **fields,
            )


def event_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr id="event-(\d+)"', html)]


@pytest.fixture
def trail(db):
    """Six events that differ in one thing each."""
    return {
        "pin": record("checkpoint.pin", at=datetime(2026, 11, 1, 9, tzinfo=UTC), reason="keep for the paper"),
        "hold": record(
            "hold.place",
            at=datetime(2026, 11, 2, 9, tzinfo=UTC),
            actor="grace",
            reason="litigation",
            case_ref="LEGAL-2026-17",
        ),
        "release": record("hold.release", at=datetime(2026, 11, 3, 23, 59, tzinfo=UTC), actor="linus"),
        "scan": record(
            "bucket.scan",
            at=datetime(2026, 11, 4, 9, tzinfo=UTC),
            actor="worker",
            source="task",
            target_type="location",
            target_label="s3:ckpt-eu",
        ),
        "api": record("checkpoint.pin", at=datetime(2026, 11, 5, 9, tzinfo=UTC), source="api", actor="script"),
        "refused": record("access.refused", at=datetime(2026, 11, 6, 9, tzinfo=UTC), actor="intern"),
    }


FILTERS = [
    ("actor=grac", ["hold"]),
    ("action=hold", ["release", "hold"]),
    ("action=hold.place", ["hold"]),
    ("target_type=location", ["scan"]),
    ("source=api", ["api"]),
    ("source=task", ["scan"]),
    ("since=2026-11-03&until=2026-11-04", ["scan", "release"]),
    ("until=2026-11-01", ["pin"]),
    ("q=LEGAL-2026", ["hold"]),
    ("q=paper", ["pin"]),
    ("actor=ada&action=checkpoint", ["pin"]),
    ("", ["refused", "api", "scan", "release", "hold", "pin"]),
]


@pytest.mark.parametrize(("query", "expected"), FILTERS)
def test_the_page_and_the_api_filter_the_trail_alike(trail, signed_in, query, expected):
    ids = [trail[name].pk for name in expected]
    assert event_ids(signed_in.get(f"/audit/?{query}").content.decode()) == ids
    body = signed_in.get(f"/api/v1/audit/?{query}").json()
    assert [e["id"] for e in body["results"]] == ids


def test_a_bad_filter_value_is_explained_and_shows_nothing(trail, signed_in):
    response = signed_in.get("/audit/?since=yesterday&source=carrier-pigeon")
    html = response.content.decode()
    assert response.status_code == 200
    assert event_ids(html) == []
    assert "Enter a valid date." in html
    assert "Select a valid choice" in html
    assert signed_in.get("/api/v1/audit/?since=yesterday").status_code == 400


def test_the_page_shows_who_what_why_and_links_the_target(db, signed_in):
    run = Run.objects.create(team=Team.objects.create(name="vision"), name="vit-huge")
    record(
        "run.hold", target_type="run", target_id=run.pk, target_label="vision/vit-huge", reason="audit", case_ref="C-1"
    )
    record("x.y", before={"state": "active"}, after={"state": "held"})
    html = signed_in.get("/audit/").content.decode()
    assert f'<a href="/runs/{run.pk}/">vision/vit-huge</a>' in html
    assert "case C-1" in html
    assert "state: active → held" in html
    assert "UTC" in html
    assert 'aria-current="page">Audit' in html


def test_the_empty_trail_says_so(db, signed_in):
    html = signed_in.get("/audit/").content.decode()
    assert "No events yet" in html
    # Signing in wrote nothing; a filter on an empty trail says nothing matches.
    assert "No events match" in signed_in.get("/audit/?actor=nobody").content.decode()


def test_pages_walk_the_trail_by_keyset_both_ways(db, signed_in):
    events = [record(f"a.{i}") for i in range(120)]
    newest_first = [e.pk for e in reversed(events)]
    first = signed_in.get("/audit/?action=a").content.decode()
    assert event_ids(first) == newest_first[:50]
    assert "← Newer</span>" in first  # disabled: nothing newer
    older = re.search(r'href="\?action=a&amp;before=(\d+)" rel="next"', first)
    second = signed_in.get(f"/audit/?action=a&before={older[1]}").content.decode()
    assert event_ids(second) == newest_first[50:100]
    older = re.search(r'href="\?action=a&amp;before=(\d+)" rel="next"', second)
    third = signed_in.get(f"/audit/?action=a&before={older[1]}").content.decode()
    assert event_ids(third) == newest_first[100:]
    assert "Older →</span>" in third  # disabled: nothing older
    newer = re.search(r'href="\?action=a&amp;after=(\d+)" rel="prev"', third)
    assert event_ids(signed_in.get(f"/audit/?action=a&after={newer[1]}").content.decode()) == newest_first[50:100]


def test_the_audit_page_query_count_does_not_grow_with_events(db, signed_in):
    record("a.0", reason="first")
    one = queries_for(signed_in, "/audit/")
    filtered = queries_for(signed_in, "/audit/?actor=ada&since=2020-01-01&q=first")
    for i in range(150):
        record(f"a.{i}", before={"i": i}, after={"i": i + 1})
    assert queries_for(signed_in, "/audit/") == one
    assert queries_for(signed_in, "/audit/?actor=ada&since=2020-01-01&q=first") == filtered
    assert queries_for(signed_in, f"/audit/?before={AuditEvent.objects.order_by('-pk')[60].pk}") <= one + 1


def read_csv(response) -> list[dict[str, str]]:
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="audit-trail-')
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_the_csv_export_streams_the_filtered_trail_oldest_first(trail, signed_in):
    rows = read_csv(signed_in.get("/audit/export.csv?action=hold"))
    assert [int(r["id"]) for r in rows] == [trail["hold"].pk, trail["release"].pk]
    hold = rows[0]
    assert hold["at_utc"] == "2026-11-02T09:00:00+00:00"
    assert (hold["actor"], hold["source"], hold["action"]) == ("grace", "ui", "hold.place")
    assert (hold["reason"], hold["case_ref"], hold["target_type"]) == ("litigation", "LEGAL-2026-17", "checkpoint")
    assert hold["hash"] == trail["hold"].hash
    everything = read_csv(signed_in.get("/audit/export.csv"))
    assert len(everything) == 6


def test_the_csv_export_keeps_json_and_never_lets_a_cell_run_as_a_formula(db, signed_in):
    record("x.y", reason='=HYPERLINK("http://evil")', before={"a": 1}, after={"b": [1, 2]})
    [row] = read_csv(signed_in.get("/audit/export.csv"))
    assert row["reason"] == '\'=HYPERLINK("http://evil")'
    assert (row["before"], row["after"]) == ('{"a": 1}', '{"b": [1, 2]}')


def test_the_page_links_the_export_of_what_it_shows(trail, signed_in):
    html = signed_in.get("/audit/?source=api").content.decode()
    assert 'href="/audit/export.csv?source=api"' in html


def test_the_api_is_read_only_even_for_admins(trail, admin_client):
    event = trail["pin"]
    answer = admin_client.get(f"/api/v1/audit/{event.pk}/").json()
    assert (answer["hash"], answer["alg"]) == (event.hash, event.alg)
    assert answer["alg"].startswith("hmac-sha256:")
    assert admin_client.post("/api/v1/audit/", {"action": "x"}).status_code == 405
    assert admin_client.put(f"/api/v1/audit/{event.pk}/", {}).status_code == 405
    assert admin_client.patch(f"/api/v1/audit/{event.pk}/", {}).status_code == 405
    assert admin_client.delete(f"/api/v1/audit/{event.pk}/").status_code == 405
    assert AuditEvent.objects.get(pk=event.pk).action == "checkpoint.pin"


# --- each run's and checkpoint's own history --------------------------------------------------------


def test_a_run_page_shows_its_own_and_its_checkpoints_history_and_no_other(db, signed_in):
    run = Run.objects.create(team=Team.objects.create(name="vision"), name="vit-huge")
    other = Run.objects.create(team=run.team, name="vit-small")
    ckpt = Checkpoint.objects.create(run=run, step=100)
    foreign = Checkpoint.objects.create(run=other, step=100)
    record("run.hold", target_type="run", target_id=run.pk, reason="run-level hold")
    record("checkpoint.pin", target_type="checkpoint", target_id=ckpt.pk, reason="pinned step 100")
    record("checkpoint.pin", target_type="checkpoint", target_id=foreign.pk, reason="pin of another run")
    record("host.register", target_type="host", target_id=run.pk, reason="a host with the same id")
    run_page = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "run-level hold" in run_page and "pinned step 100" in run_page
    assert "pin of another run" not in run_page and "a host with the same id" not in run_page
    assert f'href="/audit/?run={run.pk}"' in run_page
    ckpt_page = signed_in.get(f"/checkpoints/{ckpt.pk}/").content.decode()
    assert "pinned step 100" in ckpt_page and "run-level hold" not in ckpt_page
    assert f'href="/audit/?target_type=checkpoint&amp;target_id={ckpt.pk}"' in ckpt_page
    # The link leads to the same events on the trail.
    assert len(event_ids(signed_in.get(f"/audit/?run={run.pk}").content.decode())) == 2
    assert "pin of another run" in signed_in.get(f"/checkpoints/{foreign.pk}/").content.decode()


def test_a_checkpoint_with_no_history_says_so(db, signed_in):
    run = Run.objects.create(team=Team.objects.create(name="vision"), name="vit-huge")
    ckpt = Checkpoint.objects.create(run=run, step=100)
    assert (
        "No action has been taken on this checkpoint yet" in signed_in.get(f"/checkpoints/{ckpt.pk}/").content.decode()
    )


def test_the_run_page_history_costs_the_same_queries_for_many_events(db, signed_in):
    run = Run.objects.create(team=Team.objects.create(name="vision"), name="vit-huge")
    ckpts = [Checkpoint.objects.create(run=run, step=s) for s in range(3)]
    record("run.hold", target_type="run", target_id=run.pk)
    one = queries_for(signed_in, f"/runs/{run.pk}/")
    for ckpt in ckpts:
        for i in range(8):
            record(f"checkpoint.x{i}", target_type="checkpoint", target_id=ckpt.pk)
    assert queries_for(signed_in, f"/runs/{run.pk}/") == one


# --- the chain's verification status ------------------------------------------------------------------


def test_an_admin_verifies_the_chain_from_the_page_and_the_page_shows_when(db, signed_in, signed_in_as):
    for i in range(3):
        record(f"a.{i}")
    assert "Not verified yet" in signed_in.get("/audit/").content.decode()
    done = signed_in.post("/audit/verify/", follow=True).content.decode()
    assert "The audit chain is intact: 3 events checked. No anchor to compare it with." in done
    assert "Intact</span> Last verified" in done
    event = AuditEvent.objects.get(action="audit.verify")
    assert event.after == {"intact": True, "checked": 3, "anchors_checked": 0, "broken_event": None, "why": ""}
    viewer_page = signed_in_as("viewer").get("/audit/").content.decode()
    assert "Verify the chain now" not in viewer_page
    assert "manage.py verify_audit" in viewer_page
    assert "Intact</span>" in viewer_page


def test_a_tampered_event_shows_as_a_broken_chain_on_the_page(db, signed_in):
    events = [record(f"a.{i}") for i in range(4)]
    tamper("UPDATE catalog_auditevent SET reason = %s WHERE id = %s", ["edited", events[1].pk])
    done = signed_in.post("/audit/verify/", follow=True).content.decode()
    assert f"Audit trail verification failed: the chain is broken at event {events[1].pk}" in done
    assert "the one event before it is intact" in done
    assert "The audit trail failed verification" in done  # the red banner
    assert "Broken</span>" in done
    assert AuditEvent.objects.get(action="audit.verify").after["broken_event"] == events[1].pk


def test_the_verify_button_runs_in_a_real_worker_and_the_page_shows_the_result(celery_worker_process, signed_in):
    from tests.conftest import wait_for

    for i in range(3):
        record(f"a.{i}")
    started = signed_in.post("/audit/verify/", follow=True).content.decode()
    assert "Verification of the audit chain started; reload this page for its result." in started
    wait_for(lambda: AuditEvent.objects.filter(action="audit.verify").exists(), timeout=60, what="the worker's verify")
    event = AuditEvent.objects.get(action="audit.verify")
    assert (event.actor_label, event.source, event.after["checked"]) == ("ada", "ui", 3)
    assert "Intact</span> Last verified" in signed_in.get("/audit/").content.decode()


def test_the_trail_is_filtered_by_a_runs_name_or_what_it_is_about_without_looking_up_ids(db, signed_in):
    run = Run.objects.create(team=Team.objects.create(name="vision"), name="vit-huge")
    other = Run.objects.create(team=run.team, name="vit-small")
    record("run.hold", target_type="run", target_id=run.pk, target_label="vision/vit-huge", reason="mine")
    record("run.hold", target_type="run", target_id=other.pk, target_label="vision/vit-small", reason="theirs")
    by_name = signed_in.get("/audit/?run=vision/vit-huge").content.decode()
    assert len(event_ids(by_name)) == 1 and "mine" in by_name
    assert len(event_ids(signed_in.get(f"/audit/?run={run.pk}").content.decode())) == 1  # ids still work
    assert len(event_ids(signed_in.get("/audit/?target=vit-small").content.decode())) == 1
    wrong = signed_in.get("/audit/?run=vision/nope").content.decode()
    assert "write it as team/run" in wrong
    assert 'placeholder="team/run"' in signed_in.get("/audit/").content.decode()
