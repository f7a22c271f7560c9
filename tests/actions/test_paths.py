"""Every way in (pages, API, management command, admin) calls the same services: the same refusals,
one audit event per action, and no bypass of a hold for an admin.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from actions import services
from actions.models import DeletionJob, DeletionState, Hold, Pin
from audit.models import AuditEvent
from tests.actions.conftest import as_ui, events
from tests.conftest import queries_for

pytestmark = pytest.mark.django_db


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def held_checkpoint(fleet, olga):
    ckpt = fleet.checkpoints[100]
    services.hold(run=fleet.run, checkpoint=ckpt, reason="litigation", case_ref="LEG-7", actor=as_ui(olga))
    return ckpt


def actions_written() -> int:
    return AuditEvent.objects.exclude(action="access.refused").count()


# --- an admin cannot delete a held checkpoint, whichever way in ------------------------------------


def test_an_admin_cannot_schedule_a_held_checkpoint_through_the_page(fleet, olga, adam):
    ckpt = held_checkpoint(fleet, olga)
    client = client_for(adam)
    n = actions_written()
    preview = client.get(reverse("actions:schedule", args=[ckpt.pk]))
    assert preview.status_code == 200
    assert b"cannot be scheduled" in preview.content and b"legal hold" in preview.content
    assert b"Schedule deletion</button>" not in preview.content
    answer = client.post(reverse("actions:schedule", args=[ckpt.pk]), {"reason": "I am admin"}, follow=True)
    assert answer.status_code == 200
    assert b"Not scheduled" in answer.content and b"legal hold" in answer.content
    assert not DeletionJob.objects.exists() and actions_written() == n


def test_an_admin_cannot_schedule_a_held_checkpoint_through_the_api(fleet, olga, adam):
    ckpt = held_checkpoint(fleet, olga)
    n = actions_written()
    answer = client_for(adam).post(
        "/api/v1/actions/deletions/", {"checkpoint": ckpt.pk, "reason": "I am admin"}, content_type="application/json"
    )
    assert answer.status_code == 400
    assert answer.json()["error"] == "held" and "legal hold" in answer.json()["detail"]
    assert not DeletionJob.objects.exists() and actions_written() == n


def test_an_admin_cannot_schedule_a_held_checkpoint_through_the_command(fleet, olga, adam):
    ckpt = held_checkpoint(fleet, olga)
    n = actions_written()
    with pytest.raises(CommandError, match="legal hold"):
        call_command("fleet_action", "schedule", "--as", "adam", "--checkpoint", str(ckpt.pk), "--reason", "admin")
    assert not DeletionJob.objects.exists() and actions_written() == n


def test_the_admin_site_adds_changes_and_deletes_nothing(fleet, olga, adam):
    adam.is_staff = adam.is_superuser = True
    adam.save()
    held_checkpoint(fleet, olga)
    client = client_for(adam)
    for model in ("deletionjob", "hold", "pin", "deletionitem"):
        assert client.get(reverse(f"admin:actions_{model}_changelist")).status_code == 200
        assert client.get(reverse(f"admin:actions_{model}_add")).status_code == 403
    hold = Hold.objects.get()
    assert client.post(reverse("admin:actions_hold_delete", args=[hold.pk]), {"post": "yes"}).status_code == 403
    page = client.post(reverse("admin:actions_hold_change", args=[hold.pk]), {"reason": "x"})
    assert page.status_code in (200, 403)
    hold.refresh_from_db()
    assert hold.active and hold.reason == "litigation"


# --- the pages ---------------------------------------------------------------------------------------


def test_the_checkpoint_page_shows_protection_and_the_forms(fleet, olga, oscar):
    ckpt = held_checkpoint(fleet, olga)
    services.pin(checkpoint=ckpt, reason="paper baseline", actor=as_ui(olga))
    page = client_for(olga).get(reverse("catalog:checkpoint-detail", args=[ckpt.pk])).content.decode()
    assert "Under legal hold" in page and "LEG-7" in page and "paper baseline" in page
    assert "You placed this hold, so another person must release it" in page
    other = client_for(oscar).get(reverse("catalog:checkpoint-detail", args=[ckpt.pk])).content.decode()
    assert reverse("actions:release", args=[Hold.objects.get().pk]) in other
    assert 'name="csrfmiddlewaretoken"' in other


def test_a_viewer_sees_protection_but_no_forms(fleet, olga, vic):
    ckpt = held_checkpoint(fleet, olga)
    page = client_for(vic).get(reverse("catalog:checkpoint-detail", args=[ckpt.pk])).content.decode()
    assert "LEG-7" in page and "need the operator role" in page
    assert reverse("actions:pin", args=[ckpt.pk]) not in page
    answer = client_for(vic).post(reverse("actions:pin", args=[ckpt.pk]), {"reason": "x"}, follow=True)
    assert b"Not pinned" in answer.content and b"operator role" in answer.content
    assert not Pin.objects.exists()


def test_forms_need_csrf(fleet, olga):
    client = Client(enforce_csrf_checks=True)
    client.force_login(olga)
    answer = client.post(reverse("actions:pin", args=[fleet.checkpoints[100].pk]), {"reason": "x"})
    assert answer.status_code == 403 and not Pin.objects.exists()


def test_pin_hold_release_through_the_pages(fleet, olga, oscar):
    ckpt = fleet.checkpoints[200]
    olga_c, oscar_c = client_for(olga), client_for(oscar)
    n = events()
    answer = olga_c.post(reverse("actions:pin", args=[ckpt.pk]), {"reason": "keep"}, follow=True)
    assert b"Pinned" in answer.content and events() == n + 1
    pin = Pin.objects.get()
    olga_c.post(reverse("actions:unpin", args=[pin.pk]))
    assert events() == n + 2 and not Pin.objects.filter(unpinned_at__isnull=True).exists()
    answer = olga_c.post(reverse("actions:hold", args=[fleet.run.pk]), {"reason": "audit", "case_ref": ""}, follow=True)
    assert b"Not held" in answer.content and b"case reference is required" in answer.content
    olga_c.post(reverse("actions:hold", args=[fleet.run.pk]), {"reason": "audit", "case_ref": "LEG-8"})
    hold = Hold.objects.get()
    answer = olga_c.post(reverse("actions:release", args=[hold.pk]), {"reason": "mine"}, follow=True)
    assert b"another person must release it" in answer.content
    oscar_c.post(reverse("actions:release", args=[hold.pk]), {"reason": "closed"})
    hold.refresh_from_db()
    assert not hold.active and hold.released_label == "oscar"


def test_schedule_approve_and_cancel_through_the_pages(fleet, olga, april, settings):
    settings.DELETION_APPROVAL_BYTES = 100
    ckpt = fleet.checkpoints[100]
    olga_c, april_c = client_for(olga), client_for(april)
    page = olga_c.get(reverse("actions:schedule", args=[ckpt.pk])).content.decode()
    assert "6 items" in page and "6.0 KiB" in page and "Another person must approve it" in page
    assert "newest restorable checkpoint of the run afterwards" in page
    answer = olga_c.post(reverse("actions:schedule", args=[ckpt.pk]), {"reason": "superseded"}, follow=True)
    job = DeletionJob.objects.get()
    assert answer.redirect_chain[-1][0] == reverse("actions:deletion-detail", args=[job.pk])
    assert b"needs another person&#x27;s approval" in answer.content
    assert b"You scheduled this deletion" not in answer.content  # olga is no approver: no approve form at all
    answer = april_c.post(reverse("actions:approve", args=[job.pk]), follow=True)
    job.refresh_from_db()
    assert job.state == DeletionState.SCHEDULED and b"approved" in answer.content
    # Approved, it is the operators' to cancel: the approver is refused, the operator cancels it.
    april_c.post(reverse("actions:cancel", args=[job.pk]), {"reason": "wrong step"})
    job.refresh_from_db()
    assert job.state == DeletionState.SCHEDULED
    olga_c.post(reverse("actions:cancel", args=[job.pk]), {"reason": "wrong step"})
    job.refresh_from_db()
    assert job.state == DeletionState.CANCELLED
    listing = olga_c.get(reverse("actions:deletion-list") + "?show=all").content.decode()
    assert reverse("actions:deletion-detail", args=[job.pk]) in listing


def test_a_copy_of_another_checkpoint_is_refused_readably(fleet, olga):
    other_copy = fleet.copy(200, fleet.nvme)
    url = reverse("actions:schedule", args=[fleet.checkpoints[100].pk]) + f"?copy={other_copy.pk}"
    answer = client_for(olga).get(url, follow=True)
    assert b"not a copy of this checkpoint" in answer.content


def test_panel_queries_do_not_grow_with_the_data(fleet, olga, oscar):
    from tests.actions.conftest import build_fleet  # noqa: F401

    client = client_for(olga)
    run_url = reverse("catalog:run-detail", args=[fleet.run.pk])
    ckpt_url = reverse("catalog:checkpoint-detail", args=[fleet.checkpoints[100].pk])
    services.pin(checkpoint=fleet.checkpoints[100], reason="a", actor=as_ui(olga))
    services.hold(run=fleet.run, reason="r", case_ref="C-1", actor=as_ui(olga))
    base_run, base_ckpt = queries_for(client, run_url), queries_for(client, ckpt_url)
    for step in (200, 300):
        services.pin(checkpoint=fleet.checkpoints[step], reason="b", actor=as_ui(olga))
    services.hold(run=fleet.run, checkpoint=fleet.checkpoints[100], reason="r", case_ref="C-2", actor=as_ui(oscar))
    services.hold(run=fleet.run, reason="r", case_ref="C-3", actor=as_ui(oscar))
    assert queries_for(client, run_url) == base_run
    assert queries_for(client, ckpt_url) == base_ckpt
    deletions = reverse("actions:deletion-list") + "?show=all"
    assert queries_for(client, deletions) <= base_run + 5


# --- the API ---------------------------------------------------------------------------------------


def test_the_api_pins_holds_schedules_and_separates_duties(fleet, olga, oscar, april):
    olga_c, oscar_c, april_c = client_for(olga), client_for(oscar), client_for(april)
    ckpt = fleet.checkpoints[100]
    n = events()
    made = olga_c.post(
        "/api/v1/actions/pins/", {"checkpoint": ckpt.pk, "reason": "keep"}, content_type="application/json"
    )
    assert made.status_code == 201 and made.json()["active"] and events() == n + 1
    again = olga_c.post(
        "/api/v1/actions/pins/", {"checkpoint": ckpt.pk, "reason": "x"}, content_type="application/json"
    )
    assert again.status_code == 400 and again.json()["error"] == "already_pinned"
    assert olga_c.post(f"/api/v1/actions/pins/{made.json()['id']}/unpin/").status_code == 200

    hold = olga_c.post(
        "/api/v1/actions/holds/",
        {"run": fleet.run.pk, "checkpoint": ckpt.pk, "reason": "audit", "case_ref": "LEG-10"},
        content_type="application/json",
    ).json()
    own = olga_c.post(f"/api/v1/actions/holds/{hold['id']}/release/", {"reason": "x"}, content_type="application/json")
    assert own.status_code == 403 and "another person" in own.json()["detail"]
    assert (
        oscar_c.post(
            f"/api/v1/actions/holds/{hold['id']}/release/", {"reason": "done"}, content_type="application/json"
        ).status_code
        == 200
    )

    preview = olga_c.get(f"/api/v1/actions/deletions/preview/?checkpoint={fleet.checkpoints[300].pk}").json()
    assert preview["allowed"] and preview["files"] == 6 and preview["needs_approval"]
    assert preview["newest_restorable_after"] == fleet.checkpoints[200].pk
    job = olga_c.post(
        "/api/v1/actions/deletions/",
        {"checkpoint": fleet.checkpoints[300].pk, "reason": "superseded"},
        content_type="application/json",
    ).json()
    assert job["state"] == "awaiting_approval" and job["items_total"] == 6
    own = olga_c.post(f"/api/v1/actions/deletions/{job['id']}/approve/")
    assert own.status_code == 403
    assert april_c.post(f"/api/v1/actions/deletions/{job['id']}/approve/").json()["state"] == "scheduled"
    items = olga_c.get(f"/api/v1/actions/deletions/{job['id']}/items/").json()
    assert len(items["results"]) == 6
    bad = olga_c.post(f"/api/v1/actions/deletions/{job['id']}/cancel/", {}, content_type="application/json")
    assert bad.status_code == 400 and "reason" in bad.json()["detail"]
    missing = olga_c.post(
        "/api/v1/actions/deletions/", {"checkpoint": 999999, "reason": "x"}, content_type="application/json"
    )
    assert missing.status_code == 404


# --- the command -----------------------------------------------------------------------------------


def test_the_command_acts_as_the_named_person(fleet, olga, oscar, capsys):
    ckpt = fleet.checkpoints[100]
    n = events()
    call_command("fleet_action", "pin", "--as", "olga", "--checkpoint", str(ckpt.pk), "--reason", "keep")
    event = AuditEvent.objects.order_by("-id").first()
    assert events() == n + 1 and (event.actor_label, event.source, event.action) == (
        "olga",
        "command",
        "checkpoint.pin",
    )
    with pytest.raises(CommandError, match="--as"):
        call_command("fleet_action", "unpin", "--checkpoint", str(ckpt.pk))
    call_command("fleet_action", "unpin", "--as", "oscar", "--checkpoint", str(ckpt.pk))
    call_command("fleet_action", "hold", "--as", "olga", "--run", str(fleet.run.pk), "--reason", "r", "--case", "C-9")
    hold = Hold.objects.get()
    with pytest.raises(CommandError, match="another person"):
        call_command("fleet_action", "release", "--as", "olga", "--hold", str(hold.pk), "--reason", "x")
    call_command("fleet_action", "release", "--as", "oscar", "--hold", str(hold.pk), "--reason", "closed")
    call_command("fleet_action", "preview", "--checkpoint", str(ckpt.pk))
    assert "6 item(s)" in capsys.readouterr().out
    call_command("fleet_action", "schedule", "--as", "olga", "--checkpoint", str(ckpt.pk), "--reason", "old")
    job = DeletionJob.objects.get()
    call_command("fleet_action", "cancel", "--as", "oscar", "--deletion", str(job.pk), "--reason", "no")
    job.refresh_from_db()
    assert job.state == DeletionState.CANCELLED
    assert AuditEvent.objects.filter(action="access.refused", actor_label="olga").exists()
