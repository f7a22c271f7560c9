"""Moves through the API, the pages and the shell: role checks, preview changes nothing, request writes one job and
one event per checkpoint, bad input answers clearly and changes nothing."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from actions.models import Hold
from audit.models import AuditEvent
from promotion.choices import Direction, JobState
from promotion.models import PromotionJob
from tests.promotion.conftest import events

pytestmark = pytest.mark.services


def two_checkpoints(kit):
    first, _ = kit.checkpoint(500, {"a": (b"a" * 100, "STANDARD"), "b": (b"b" * 50, "STANDARD")})
    second, _ = kit.checkpoint(510, {"a": (b"c" * 10, "STANDARD")})
    return first, second


def test_the_api_previews_a_run_move_and_changes_nothing(client, kit):
    first, second = two_checkpoints(kit)
    Hold.objects.create(
        run=kit.run,
        checkpoint=second,
        reason="audit",
        case_ref="CASE-3",
        placed_label="hana",
        placed_at=first.first_seen_at,
    )
    cold = kit.bucket()
    client.force_login(kit.operator)
    before = AuditEvent.objects.count()

    answer = client.post(
        "/api/v1/moves/preview/",
        {"run": kit.run.pk, "target_location": cold.location.pk, "target_storage_class": "GLACIER_IR"},
        content_type="application/json",
    )

    assert answer.status_code == 200, answer.content
    plan = answer.json()
    assert [c["checkpoint"] for c in plan["checkpoints"]] == [first.pk]
    assert (plan["files"], plan["bytes"]) == (2, 150)
    assert plan["checkpoints"][0]["freeing"].startswith("two-phase deletion")
    assert plan["excluded"] == [
        {"checkpoint": second.pk, "label": str(second), "code": "held", "reason": plan["excluded"][0]["reason"]}
    ]
    assert "CASE-3" in plan["excluded"][0]["reason"]
    assert plan["stays_hot"][0]["run"] == kit.run.pk
    assert not PromotionJob.objects.exists() and AuditEvent.objects.count() == before


def test_the_api_requests_one_job_per_checkpoint_with_one_event_each(client, kit, django_capture_on_commit_callbacks):
    first, second = two_checkpoints(kit)
    client.force_login(kit.operator)
    with django_capture_on_commit_callbacks(execute=False):
        answer = client.post(
            "/api/v1/moves/",
            {
                "checkpoints": [first.pk, second.pk],
                "target_location": kit.source.location.pk,
                "target_storage_class": "STANDARD_IA",
                "reason": "finished run",
            },
            content_type="application/json",
        )
    assert answer.status_code == 201, answer.content
    jobs = answer.json()
    assert sorted(j["checkpoint"] for j in jobs) == sorted([first.pk, second.pk])
    assert {(j["direction"], j["state"], j["in_place"]) for j in jobs} == {("demote", "requested", True)}
    assert len(events("move.request")) == 2
    assert {e.actor_label for e in events("move.request")} == {"olga"}


def test_the_api_refuses_a_viewer_and_bad_input_and_changes_nothing(client, kit):
    first, _ = two_checkpoints(kit)
    cold = kit.bucket()
    client.force_login(kit.viewer)
    refused = client.post(
        "/api/v1/moves/",
        {
            "checkpoints": [first.pk],
            "target_location": cold.location.pk,
            "target_storage_class": "GLACIER_IR",
            "reason": "r",
        },
        content_type="application/json",
    )
    assert refused.status_code == 403 and "operator" in refused.json()["detail"]

    client.force_login(kit.operator)
    nothing = client.post(
        "/api/v1/moves/",
        {"target_location": cold.location.pk, "target_storage_class": "GLACIER_IR"},
        content_type="application/json",
    )
    assert nothing.status_code == 400
    bad_class = client.post(
        "/api/v1/moves/",
        {"checkpoints": [first.pk], "target_location": cold.location.pk, "target_storage_class": "GOLD"},
        content_type="application/json",
    )
    assert bad_class.status_code == 400 and "target_storage_class" in bad_class.json()["fields"]
    missing = client.post(
        "/api/v1/moves/",
        {
            "checkpoints": [999999],
            "target_location": cold.location.pk,
            "target_storage_class": "GLACIER_IR",
            "reason": "r",
        },
        content_type="application/json",
    )
    assert missing.status_code == 404
    no_reason = client.post(
        "/api/v1/moves/",
        {"checkpoints": [first.pk], "target_location": cold.location.pk, "target_storage_class": "GLACIER_IR"},
        content_type="application/json",
    )
    assert no_reason.status_code == 400 and "reason" in no_reason.json()["detail"]
    assert not PromotionJob.objects.exists()
    assert not events("move.request")


def test_the_page_previews_then_requests_a_move_and_the_job_page_says_demotion(
    client, kit, django_capture_on_commit_callbacks
):
    first, _ = two_checkpoints(kit)
    cold = kit.bucket()
    client.force_login(kit.operator)
    checkpoint_page = client.get(f"/checkpoints/{first.pk}/")
    assert b"Move to a colder tier" in checkpoint_page.content
    run_page = client.get(f"/runs/{kit.run.pk}/")
    assert b"Move this run&#x27;s checkpoints" in run_page.content or b"Move this run's checkpoints" in run_page.content

    query = {"target": cold.location.pk, "storage_class": "GLACIER_IR"}
    preview = client.get(f"/checkpoints/{first.pk}/move/", query)
    assert preview.status_code == 200
    text = preview.content.decode()
    assert "What will happen" in text and "Request the move" in text and "two-phase deletion" in text
    assert not PromotionJob.objects.exists()

    with django_capture_on_commit_callbacks(execute=True):
        done = client.post(f"/checkpoints/{first.pk}/move/", {**query, "reason": "cold now"})
    job = PromotionJob.objects.get()
    assert done.status_code == 302 and done["Location"] == f"/promotions/{job.pk}/"
    assert job.direction == Direction.DEMOTE
    job_page = client.get(f"/promotions/{job.pk}/").content.decode()
    assert f"Demotion #{job.pk}" in job_page and "freed only after the new copy verifies" in job_page
    jobs_page = client.get("/jobs/").content.decode()
    assert "Demote llm/llama step 500" in jobs_page


def test_a_refused_page_move_says_why(client, kit):
    first, _ = two_checkpoints(kit)
    client.force_login(kit.operator)
    answer = client.get(
        f"/checkpoints/{first.pk}/move/", {"target": kit.source.location.pk, "storage_class": "STANDARD"}
    )
    assert answer.status_code == 200
    assert "Left out" in answer.content.decode() and "every file at" in answer.content.decode()
    bad = client.get(f"/checkpoints/{first.pk}/move/", {"target": kit.source.location.pk, "storage_class": "GOLD"})
    assert bad.status_code == 400 and "This move cannot run" in bad.content.decode()


def test_the_command_previews_and_starts_a_move(kit, django_capture_on_commit_callbacks, capsys):
    first, second = two_checkpoints(kit)
    cold = kit.bucket()
    call_command("move", "preview", "--run", str(kit.run.pk), "--target", cold.location.name, "--class", "GLACIER_IR")
    out = capsys.readouterr().out
    assert "2 checkpoint(s), 3 file(s)" in out and "two-phase deletion" in out
    assert not PromotionJob.objects.exists()
    with django_capture_on_commit_callbacks(execute=False):
        call_command(
            "move",
            "start",
            "--checkpoint",
            str(first.pk),
            "--target",
            cold.location.name,
            "--class",
            "GLACIER_IR",
            "--reason",
            "shell",
        )
    job = PromotionJob.objects.get()
    assert (job.checkpoint, job.state, job.requested_label) == (first, JobState.REQUESTED, "manage.py")
    with pytest.raises(CommandError, match="there is no storage location"):
        call_command("move", "preview", "--checkpoint", str(second.pk), "--target", "nowhere", "--class", "GLACIER")
