"""Promotion pages and API: preview before acting, one request, live progress, refusals in one JSON shape."""

from __future__ import annotations

import pytest

from audit.models import AuditEvent
from promotion.choices import JobState
from promotion.models import PromotionJob
from promotion.services import promote
from promotion.views import requested_message
from tests.conftest import queries_for
from tests.promotion.conftest import events

pytestmark = pytest.mark.services


@pytest.fixture
def operator(client, kit):
    client.force_login(kit.operator)
    return client


def test_the_api_requests_a_promotion_and_records_the_request_id(operator, kit, django_capture_on_commit_callbacks):
    checkpoint, _ = kit.checkpoint(300, {"a": (b"a" * 64, "STANDARD_IA")})
    target = kit.bucket()

    with django_capture_on_commit_callbacks(execute=True):
        response = operator.post(
            "/api/v1/promotions/",
            {"checkpoint": checkpoint.pk, "target_location": target.location.pk, "reason": "incident 7"},
            content_type="application/json",
            HTTP_X_REQUEST_ID="req-promo-1",
        )

    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["method"], body["target_storage_class"], body["bytes_total"]) == ("copy", "STANDARD", 64)
    job = PromotionJob.objects.get(pk=body["id"])
    assert job.state == JobState.COMPLETED
    [event] = events("promotion.request")
    assert (event.request_id, event.source, event.actor_label, event.reason) == (
        "req-promo-1",
        "api",
        "olga",
        "incident 7",
    )
    detail = operator.get(f"/api/v1/promotions/{job.pk}/").json()
    assert (detail["bytes_done"], detail["percent"]) == (64, 100)
    items = operator.get(f"/api/v1/promotions/{job.pk}/items/").json()["results"]
    assert [(i["path"], i["state"]) for i in items] == [("llm/llama/step-300/a", "done")]


def test_the_api_preview_says_what_will_happen_and_changes_nothing(operator, kit):
    _checkpoint, copy = kit.checkpoint(310, {"a": (b"a" * 100, "GLACIER")})
    target = kit.bucket()
    before = AuditEvent.objects.count()

    response = operator.post(
        "/api/v1/promotions/preview/",
        {"copy": copy.pk, "target_location": target.location.pk, "target_storage_class": "STANDARD_IA"},
        content_type="application/json",
    )

    assert response.status_code == 200, response.content
    plan = response.json()
    assert (plan["method"], plan["files"], plan["bytes"], plan["archived_files"]) == ("restore", 1, 100, 1)
    assert plan["target_tier"] == "object_infrequent" and plan["currency"]
    assert not PromotionJob.objects.exists() and AuditEvent.objects.count() == before


def test_the_api_refuses_a_viewer_and_bad_input_in_one_json_shape(client, kit):
    _checkpoint, copy = kit.checkpoint(320, {"a": (b"a", "STANDARD")})
    client.force_login(kit.viewer)
    target = kit.bucket()

    refused = client.post(
        "/api/v1/promotions/",
        {"copy": copy.pk, "target_location": target.location.pk, "reason": "r"},
        content_type="application/json",
    )
    assert refused.status_code == 403
    assert refused.json()["error"] == "forbidden" and "operator" in refused.json()["detail"]

    client.force_login(kit.operator)
    colder = client.post(
        "/api/v1/promotions/",
        {"copy": copy.pk, "target_location": target.location.pk, "target_storage_class": "GLACIER", "reason": "r"},
        content_type="application/json",
    )
    assert colder.status_code == 400 and "archive class" in colder.json()["detail"]
    missing = client.post(
        "/api/v1/promotions/", {"copy": 999999, "target_location": target.location.pk}, content_type="application/json"
    )
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    no_target = client.post("/api/v1/promotions/", {"copy": copy.pk}, content_type="application/json")
    assert no_target.status_code == 400 and "target_location" in no_target.json()["fields"]
    assert not PromotionJob.objects.exists()
    assert not events("promotion.request")


def test_the_api_cancels_an_open_promotion(operator, kit):
    _checkpoint, copy = kit.checkpoint(330, {"a": (b"a", "GLACIER")})
    target = kit.bucket()
    created = operator.post(
        "/api/v1/promotions/",
        {"copy": copy.pk, "target_location": target.location.pk, "reason": "r"},
        content_type="application/json",
    ).json()

    response = operator.post(
        f"/api/v1/promotions/{created['id']}/cancel/", {"reason": "wrong step"}, content_type="application/json"
    )

    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    again = operator.post(f"/api/v1/promotions/{created['id']}/cancel/", {}, content_type="application/json")
    assert again.status_code == 409 and again.json()["error"] == "not_open"
    assert len(events("promotion.cancel")) == 1


def test_the_page_previews_then_promotes_and_shows_progress(operator, kit, django_capture_on_commit_callbacks):
    checkpoint, copy = kit.checkpoint(340, {"a": (b"a" * 2048, "STANDARD_IA")})
    target = kit.bucket()
    params = {"copy": copy.pk, "target": target.location.pk, "storage_class": "STANDARD"}

    preview = operator.get(f"/checkpoints/{checkpoint.pk}/promote/", params)
    assert preview.status_code == 200
    html = preview.content.decode()
    assert ("2.0 KiB" in html and "Object storage, standard" in html and "per month" in html) or "no price" in html
    assert not PromotionJob.objects.exists()

    with django_capture_on_commit_callbacks(execute=True):
        done = operator.post(f"/checkpoints/{checkpoint.pk}/promote/", {**params, "reason": "warm it up"})
    job = PromotionJob.objects.get()
    assert done.status_code == 302 and done["Location"] == f"/promotions/{job.pk}/"
    page = operator.get(done["Location"])
    assert page.status_code == 200 and "2.0 KiB of 2.0 KiB" in page.content.decode()
    progress = operator.get(f"/promotions/{job.pk}/progress.json").json()
    assert (progress["state"], progress["percent"], progress["bytes_done"]) == ("completed", 100, 2048)
    listing = operator.get("/promotions/").content.decode()
    assert f"/promotions/{job.pk}/" in listing
    # The files table reads the class each file is in now, not the one frozen when it was asked for.
    assert (
        '<code>STANDARD</code> <span class="muted small">was <code>STANDARD_IA</code></span>' in page.content.decode()
    )


def test_the_flash_after_asking_says_where_the_job_stands_now(operator, kit, django_capture_on_commit_callbacks):
    """With tasks in-process (the demo) a promotion may be done before its page is drawn: the flash says so."""
    _, copy = kit.checkpoint(350, {"a": (b"a" * 1024, "STANDARD_IA")})
    target = kit.bucket()
    with django_capture_on_commit_callbacks(execute=True):
        job = promote(
            copy=copy,
            target_location=target.location,
            target_storage_class="STANDARD",
            actor=kit.actor,
            reason="warm it up",
        )
        assert (
            requested_message(job, "Promotion")
            == f"Promotion #{job.pk} requested: copy between buckets or storage classes."
        )
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert requested_message(job, "Promotion") == f"Promotion #{job.pk} completed."


def test_a_refused_page_promotion_says_why_and_changes_nothing(operator, kit):
    checkpoint, copy = kit.checkpoint(350, {"a": (b"a", "STANDARD")})
    params = {"copy": copy.pk, "target": kit.source.location.pk, "storage_class": "STANDARD_IA", "reason": "r"}

    response = operator.post(f"/checkpoints/{checkpoint.pk}/promote/", params)

    assert response.status_code == 400
    assert "nothing to do" in response.content.decode() or "colder" in response.content.decode()
    assert not PromotionJob.objects.exists()


def test_the_checkpoint_page_carries_the_promotion_panel(operator, kit):
    checkpoint, _ = kit.checkpoint(360, {"a": (b"a", "STANDARD")})

    html = operator.get(f"/checkpoints/{checkpoint.pk}/").content.decode()

    assert "Preview promotion" in html and "never been promoted" in html and "js/promotion.js" in html


def test_the_jobs_list_costs_the_same_queries_for_one_job_or_many(operator, kit):
    targets = [kit.bucket() for _ in range(4)]
    checkpoint, copy = kit.checkpoint(370, {"a": (b"a", "GLACIER")})
    from promotion.services import promote

    assert "No promotion yet" in operator.get("/promotions/").content.decode()
    promote(copy=copy, target_location=targets[0].location, actor=kit.actor, reason="r")
    one = queries_for(operator, "/promotions/")
    one_page = queries_for(operator, f"/checkpoints/{checkpoint.pk}/")
    for target in targets[1:]:
        promote(copy=copy, target_location=target.location, actor=kit.actor, reason="r")
    assert queries_for(operator, "/promotions/") == one
    assert queries_for(operator, f"/checkpoints/{checkpoint.pk}/") == one_page
