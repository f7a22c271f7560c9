"""Bulk actions from the triage lists: the preview says per checkpoint what the single action's preview says,
confirming goes through the same services (one audit event each), refusals are reported and change nothing."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from actions import services
from actions.models import DeletionItem, DeletionJob, Hold, Pin
from audit.models import AuditEvent
from catalog.choices import CopyState
from catalog.models import Checkpoint, CheckpointCopy
from tests.actions.conftest import as_ui, events

pytestmark = pytest.mark.django_db

URL = "/actions/bulk/"


def client_for(user, **kwargs) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def item(fleet, step: int, location=None) -> str:
    ck = fleet.checkpoints[step]
    return f"{ck.pk}:{fleet.copy(step, location).pk}" if location is not None else str(ck.pk)


def confirm(client, action: str, items: list[str], **fields):
    return client.post(URL, {"action": action, "item": items, "next": "/queue/copies/?kind=partial", **fields})


# --- the lists offer it -----------------------------------------------------------------------------------


def test_the_copy_queue_has_a_checkbox_per_row_and_the_bulk_bar_for_operators(fleet, olga, vic):
    CheckpointCopy.objects.filter(location=fleet.nvme).update(state=CopyState.PARTIAL)
    html = client_for(olga).get("/queue/copies/?kind=partial").content.decode()
    for step in (100, 200, 300):
        copy = fleet.copy(step, fleet.nvme)
        assert f'value="{fleet.checkpoints[step].pk}:{copy.pk}"' in html
        assert f'<label for="pick-{copy.pk}" class="visually-hidden">Select vision/vit-huge step {step}' in html
    assert "Select all on this page" in html and 'action="/actions/bulk/"' in html
    assert 'value="delete-copy"' in html and "js/bulk.js" in html
    viewer = client_for(vic).get("/queue/copies/?kind=partial").content.decode()
    assert 'name="item"' not in viewer and "Select all on this page" not in viewer


def test_a_placement_flag_list_has_checkboxes_for_whole_checkpoints(fleet, olga, settings):
    settings.NVME_FINISHED_DAYS = 7
    fleet.run.status = "finished"
    fleet.run.save(update_fields=["status"])
    Checkpoint.objects.filter(run=fleet.run).update(first_seen_at=timezone.now() - timedelta(days=30))
    html = client_for(olga).get("/placement/?flag=finished_on_nvme").content.decode()
    for ck in fleet.checkpoints.values():
        assert f'name="item" value="{ck.pk}"' in html
    assert 'value="delete-checkpoint"' in html and 'value="delete-copy"' not in html


# --- the preview ------------------------------------------------------------------------------------------


def test_the_preview_of_a_bulk_deletion_lists_files_bytes_money_and_what_each_run_keeps(fleet, olga):
    response = client_for(olga).get(
        URL, {"action": "delete-copy", "item": [item(fleet, 100, fleet.nvme), item(fleet, 200, fleet.nvme)]}
    )
    assert response.status_code == 200
    preview = response.context["preview"]
    assert [(i.files, i.bytes) for i in preview.allowed] == [(3, 3072), (3, 3072)]
    assert preview.files == 6 and preview.bytes == 6144 and not preview.refused
    # Exactly what the single preview says, checkpoint by checkpoint.
    single = services.preview(checkpoint=fleet.checkpoints[100], copy=fleet.copy(100, fleet.nvme))
    first = preview.allowed[0].preview
    assert (first.files, first.bytes, first.monthly_cost) == (single.files, single.bytes, single.monthly_cost)
    assert [i["path"] for i in first.sample] == [i["path"] for i in single.sample]
    (effect,) = preview.effects
    assert effect.run == fleet.run and effect.newest_after == fleet.checkpoints[300]
    html = response.content.decode()
    assert "Schedule deletion of the listed copy of 2 checkpoints?" in html
    assert "6.0 KiB" in html and "3.0 KiB" in html and "Saves per month" in html
    assert "vision/vit-huge/checkpoint-100/model-00000.safetensors" in html
    assert "Newest restorable afterwards" in html
    assert "Confirm: schedule deletion of the listed copy of 2 checkpoints" in html
    assert DeletionJob.objects.count() == 0 and events() == 0  # a preview changes nothing


def test_the_preview_of_a_bulk_deletion_says_when_it_would_run(fleet, olga, settings):
    settings.DELETION_GRACE_DAYS = 3
    asked = timezone.now()
    response = client_for(olga).get(URL, {"action": "delete-checkpoint", "item": [item(fleet, 100)]})
    starts = response.context["preview"].execute_after
    assert asked + timedelta(days=3) <= starts <= timezone.now() + timedelta(days=3)
    html = response.content.decode()
    assert (
        "3 days" in html
        and "Would run no sooner than</dt><dd title=" in html
        and f"{starts:%Y-%m-%d %H:%M} UTC" in html
    )
    body = {"action": "delete", "items": [{"checkpoint": fleet.checkpoints[100].pk}], "reason": "superseded"}
    data = client_for(olga).post("/api/v1/actions/bulk/", body, content_type="application/json").json()
    said = datetime.fromisoformat(data["execute_after"])
    assert data["grace_days"] == 3 and asked + timedelta(days=3) <= said <= timezone.now() + timedelta(days=3)
    client_for(olga).post("/api/v1/actions/bulk/", {**body, "confirm": True}, content_type="application/json")
    job = DeletionJob.objects.get()
    assert said <= job.execute_after <= timezone.now() + timedelta(days=3), "confirmed later: no sooner than said"
    pins = {"action": "pin", "items": [{"checkpoint": fleet.checkpoints[200].pk}]}
    assert (
        "execute_after"
        not in client_for(olga).post("/api/v1/actions/bulk/", pins, content_type="application/json").json()
    )


def test_the_preview_of_a_whole_checkpoint_deletion_counts_every_copy_and_the_newest_left(fleet, olga):
    response = client_for(olga).get(URL, {"action": "delete-checkpoint", "item": [item(fleet, 300), item(fleet, 200)]})
    preview = response.context["preview"]
    assert [(i.copies, i.files, i.bytes) for i in preview.allowed] == [(2, 6, 6144), (2, 6, 6144)]
    (effect,) = preview.effects
    # Each alone leaves a newer checkpoint; both together leave step 100.
    assert effect.newest_before == fleet.checkpoints[300] and effect.newest_after == fleet.checkpoints[100]


def test_the_preview_lists_what_would_be_refused_with_the_reason(fleet, olga, oscar):
    services.hold(
        run=fleet.run, checkpoint=fleet.checkpoints[100], reason="litigation", case_ref="LEGAL-1", actor=as_ui(oscar)
    )
    services.pin(checkpoint=fleet.checkpoints[200], reason="baseline", actor=as_ui(oscar))
    response = client_for(olga).get(
        URL, {"action": "delete-checkpoint", "item": [item(fleet, 100), item(fleet, 200), item(fleet, 300)]}
    )
    preview = response.context["preview"]
    assert {i.checkpoint.step: i.refusal_code for i in preview.refused} == {100: "held", 200: "pinned"}
    assert [i.checkpoint.step for i in preview.allowed] == [300]
    html = response.content.decode()
    assert "Would be refused" in html and "under a legal hold (case LEGAL-1)" in html
    assert "until a different person releases the hold" in html and "promise 1" not in html
    assert "is pinned by oscar (baseline)" in html
    pins = client_for(olga).get(URL, {"action": "pin", "item": [item(fleet, 200), item(fleet, 300)]})
    assert [i.refusal_code for i in pins.context["preview"].refused] == ["already_pinned"]


def test_a_selection_of_nothing_or_of_garbage_changes_nothing_and_says_why(fleet, olga):
    client = client_for(olga)
    nothing = client.get(URL, {"action": "pin"})
    assert nothing.status_code == 400 and "Select at least one checkpoint" in nothing.content.decode()
    garbage = client.post(URL, {"action": "pin", "item": ["x;drop", "1:y"], "reason": "r"})
    assert garbage.status_code == 400 and "is not a checkpoint" in garbage.content.decode()
    unknown = client.post(URL, {"action": "explode", "item": [item(fleet, 100)], "reason": "r"})
    assert unknown.status_code == 400 and "Choose what to do" in unknown.content.decode()
    assert events() == 0 and Pin.objects.count() == 0


# --- confirming -------------------------------------------------------------------------------------------


def test_confirming_pins_writes_one_audit_event_per_checkpoint_and_shows_the_result(fleet, olga):
    client = client_for(olga)
    response = confirm(client, "pin", [item(fleet, 100, fleet.nvme), item(fleet, 200, fleet.pfs)], reason="baseline")
    assert response.status_code == 302
    assert set(Pin.objects.values_list("checkpoint__step", flat=True)) == {100, 200}
    pins = AuditEvent.objects.filter(action="checkpoint.pin")
    assert pins.count() == 2 == events()
    assert {e.target_id for e in pins} == {fleet.checkpoints[100].pk, fleet.checkpoints[200].pk}
    assert all(e.actor_label == "olga" and e.source == "ui" and e.reason == "baseline" for e in pins)
    assert len({e.request_id for e in pins}) == 1  # one request, told apart in the audit trail
    result = client.get(response["Location"])
    html = result.content.decode()
    assert "Pin: 2 done, 0 refused" in html
    assert f'href="/checkpoints/{fleet.checkpoints[100].pk}/"' in html
    assert f"?request_id={pins.first().request_id}" in html
    assert 'href="/queue/copies/?kind=partial"' in html


def test_a_held_checkpoint_in_a_bulk_deletion_is_refused_and_nothing_of_it_is_frozen(fleet, olga, oscar):
    held = fleet.checkpoints[100]
    services.hold(run=fleet.run, checkpoint=held, reason="litigation", case_ref="LEGAL-1", actor=as_ui(oscar))
    before = events()
    client = client_for(olga)
    response = confirm(client, "delete-checkpoint", [item(fleet, 100), item(fleet, 200)], reason="superseded")
    assert response.status_code == 302
    assert not DeletionJob.objects.filter(checkpoint=held).exists()
    assert not DeletionItem.objects.filter(copy__checkpoint=held).exists()
    job = DeletionJob.objects.get(checkpoint=fleet.checkpoints[200])
    assert job.items_total == 6 and DeletionItem.objects.filter(job=job).count() == 6
    # One audit event for the one deletion scheduled; the refusal undid nothing of it.
    assert list(AuditEvent.objects.order_by("pk").values_list("action", flat=True)[before:]) == ["deletion.schedule"]
    html = client.get(response["Location"]).content.decode()
    assert "1 done, 1 refused" in html
    assert "under a legal hold (case LEGAL-1)" in html
    assert f'href="/actions/deletions/{job.pk}/"' in html


def test_a_bulk_deletion_of_listed_copies_freezes_only_those_copies(fleet, olga):
    client = client_for(olga)
    confirm(client, "delete-copy", [item(fleet, 100, fleet.nvme), item(fleet, 200, fleet.nvme)], reason="off nvme")
    jobs = DeletionJob.objects.order_by("checkpoint__step")
    assert [(j.checkpoint.step, j.copy.location_id) for j in jobs] == [(100, fleet.nvme.pk), (200, fleet.nvme.pk)]
    assert set(DeletionItem.objects.values_list("location_id", flat=True)) == {fleet.nvme.pk}
    assert AuditEvent.objects.filter(action="deletion.schedule").count() == 2


def test_bulk_holds_need_a_reason_and_a_case_reference_and_bad_input_changes_nothing(fleet, olga):
    client = client_for(olga)
    no_case = confirm(client, "hold", [item(fleet, 100)], reason="litigation")
    assert no_case.status_code == 400 and "A case reference is required" in no_case.content.decode()
    no_reason = confirm(client, "pin", [item(fleet, 100)], reason="  ")
    assert no_reason.status_code == 400 and "A reason is required" in no_reason.content.decode()
    assert events() == 0 and not Hold.objects.exists() and not Pin.objects.exists()
    done = confirm(client, "hold", [item(fleet, 100), item(fleet, 300)], reason="litigation", case_ref="L-9")
    assert done.status_code == 302
    assert set(Hold.objects.values_list("checkpoint__step", "case_ref")) == {(100, "L-9"), (300, "L-9")}
    assert AuditEvent.objects.filter(action="hold.place").count() == 2 == events()
    # The same case again: refused per checkpoint by the service, reported, nothing added.
    again = confirm(client, "hold", [item(fleet, 100)], reason="litigation", case_ref="L-9")
    assert "Case L-9 already holds" in client.get(again["Location"]).content.decode()
    assert Hold.objects.count() == 2 and events() == 2


def test_a_viewer_is_refused_once_and_the_refusal_is_audited(fleet, vic):
    response = confirm(client_for(vic), "pin", [item(fleet, 100), item(fleet, 200)], reason="mine")
    assert response.status_code == 403
    assert "needs the operator role, which vic lacks" in response.content.decode()
    assert not Pin.objects.exists()
    (refusal,) = AuditEvent.objects.all()
    assert refusal.action == "access.refused" and refusal.actor_label == "vic"
    assert "pinning checkpoints in bulk" in refusal.after["doing"]


def test_the_confirmation_needs_the_csrf_token(fleet, olga):
    client = client_for(olga, enforce_csrf_checks=True)
    response = confirm(client, "pin", [item(fleet, 100)], reason="baseline")
    assert response.status_code == 403
    assert not Pin.objects.exists() and events() == 0
    page = client.get(URL, {"action": "pin", "item": [item(fleet, 100)]}).content.decode()
    assert 'name="csrfmiddlewaretoken"' in page


def test_an_unknown_result_says_where_to_look(olga):
    response = client_for(olga).get("/actions/bulk/0123abcd/")
    assert response.status_code == 404 and "audit trail" in response.content.decode()


# --- the API ----------------------------------------------------------------------------------------------


def test_the_api_previews_then_confirms_with_the_same_refusals(fleet, olga, oscar):
    services.pin(checkpoint=fleet.checkpoints[200], reason="baseline", actor=as_ui(oscar))
    before = events()
    client = client_for(olga)
    body = {
        "action": "delete",
        "items": [
            {"checkpoint": fleet.checkpoints[100].pk, "copy": fleet.copy(100, fleet.nvme).pk},
            {"checkpoint": fleet.checkpoints[200].pk},
        ],
        "reason": "superseded",
    }
    preview = client.post("/api/v1/actions/bulk/", body, content_type="application/json")
    assert preview.status_code == 200
    data = preview.json()
    assert data["confirmed"] is False and data["files"] == 3 and data["bytes"] == 3072
    assert [(i["allowed"], i["refusal_code"]) for i in data["items"]] == [(True, None), (False, "pinned")]
    assert data["runs"][0]["newest_restorable_after"] == fleet.checkpoints[300].pk
    assert events() == before and not DeletionJob.objects.exists()
    done = client.post("/api/v1/actions/bulk/", {**body, "confirm": True}, content_type="application/json").json()
    assert [r["checkpoint"] for r in done["done"]] == [fleet.checkpoints[100].pk]
    assert [r["code"] for r in done["refused"]] == ["pinned"]
    assert DeletionJob.objects.get().copy == fleet.copy(100, fleet.nvme)
    assert AuditEvent.objects.filter(action="deletion.schedule", source="api").count() == 1


def test_the_api_refuses_a_viewer_and_bad_input_plainly(fleet, vic, olga):
    body = {"action": "pin", "items": [{"checkpoint": fleet.checkpoints[100].pk}], "reason": "x", "confirm": True}
    refused = client_for(vic).post("/api/v1/actions/bulk/", body, content_type="application/json")
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert AuditEvent.objects.filter(action="access.refused").count() == 1 and not Pin.objects.exists()
    client = client_for(olga)
    empty = client.post("/api/v1/actions/bulk/", {"action": "pin", "items": []}, content_type="application/json")
    assert empty.status_code == 400
    no_reason = client.post("/api/v1/actions/bulk/", {**body, "reason": ""}, content_type="application/json")
    assert no_reason.status_code == 400 and "a reason is required" in no_reason.json()["detail"]
    assert not Pin.objects.exists()


def test_the_schema_documents_the_bulk_endpoint(signed_in):
    schema = signed_in.get("/api/v1/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/actions/bulk/"]["post"]
    assert "requestBody" in operation and "200" in operation["responses"]
