"""The admin: every model browsable, nothing writable, audit events untouchable, token hashes hidden."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from audit.actor import Actor
from audit.models import AuditChainHead, AuditEvent
from audit.services import audit_record
from catalog.models import Checkpoint, CheckpointCopy, IngestRow, Run, ShardFile, Team
from fleet.models import Host, HostToken, Inventory, StorageLocation
from fleet.services import host_token_issue

pytestmark = pytest.mark.django_db

ALL_MODELS = [
    Team,
    Run,
    Checkpoint,
    CheckpointCopy,
    ShardFile,
    IngestRow,
    AuditEvent,
    AuditChainHead,
    Host,
    HostToken,
    StorageLocation,
    Inventory,
]


def admin_url(model, view: str, *args) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


@pytest.fixture
def data(db):
    """One of everything, as the services and the ingest would leave it."""
    now = timezone.now()
    host = Host.objects.create(name="gpu-a01", site="dc1", region="eu-west")
    loc = StorageLocation.objects.create(
        name="gpu-a01:/mnt/nvme0", kind="nvme", tier="nvme", host=host, root_path="/mnt/nvme0"
    )
    inv = Inventory.objects.create(location=loc, host=host, status="failed", error="bad line", error_line=3)
    run = Run.objects.create(team=Team.objects.create(name="vision"), name="vit")
    checkpoint = Checkpoint.objects.create(run=run, step=10)
    copy = CheckpointCopy.objects.create(
        checkpoint=checkpoint,
        location=loc,
        path="vision/vit/checkpoint-10",
        format="hf_trainer",
        state="partial",
        reasons=["a shard is missing"],
        file_count=1,
        bytes=10,
    )
    ShardFile.objects.create(
        location=loc,
        path="vision/vit/checkpoint-10/a",
        size=10,
        mtime=now,
        copy=copy,
        first_seen_at=now,
        changed_at=now,
        changed_by=inv,
    )
    IngestRow.objects.create(inventory=inv, path="vision/vit/checkpoint-10/a", size=10, mtime=now)
    raw = host_token_issue(host=host, actor=Actor.command(label="tests"))
    with transaction.atomic():
        event = audit_record(
            actor_kind="system",
            actor_label="tests",
            source="command",
            action="checkpoint.hold",
            target_type="checkpoint",
            target_id=checkpoint.pk,
            target_label=str(checkpoint),
            reason="incident 7",
        )
    return {"event": event, "token": HostToken.objects.get(host=host), "raw_token": raw, "run": run}


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_every_model_is_registered_and_its_list_loads(admin_client, data, model):
    assert admin.site.is_registered(model)
    response = admin_client.get(admin_url(model, "changelist"))
    assert response.status_code == 200
    # The fixture made at least one row of every model, and the list shows every row there is. (Its count may be
    # the planner's estimate on PostgreSQL, for the big tables' unfiltered lists: EstimatedCountPaginator.)
    assert len(response.context["cl"].result_list) == model.objects.count() >= 1


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_nothing_can_be_added_through_the_admin(admin_client, data, model):
    assert admin_client.get(admin_url(model, "add")).status_code == 403


def listed(admin_client, model, **query) -> list:
    """The rows an admin list shows for ``query`` (a search ``q`` or a filter)."""
    response = admin_client.get(admin_url(model, "changelist"), query)
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


def test_the_list_searches_find_what_they_search_for_and_nothing_else(admin_client, data):
    shard = ShardFile.objects.get()
    copy = CheckpointCopy.objects.get()
    checkpoint = Checkpoint.objects.get()
    assert listed(admin_client, ShardFile, q="vision/vit") == [shard]
    assert listed(admin_client, ShardFile, q="llm/") == []
    assert listed(admin_client, CheckpointCopy, state__exact="partial") == [copy]
    assert listed(admin_client, CheckpointCopy, state__exact="complete") == []
    assert data["event"] in listed(admin_client, AuditEvent, q="checkpoint")
    assert listed(admin_client, AuditEvent, q="no-such-action") == []
    assert listed(admin_client, Checkpoint, q="vit") == [checkpoint]
    assert listed(admin_client, Checkpoint, q="10") == [checkpoint]  # the step, exactly
    assert listed(admin_client, Checkpoint, q="1") == []


def test_an_audit_event_can_be_viewed_but_not_changed_even_by_a_superuser(admin_client, data):
    event = data["event"]
    url = admin_url(AuditEvent, "change", event.pk)
    page = admin_client.get(url)
    assert page.status_code == 200
    assert b"incident 7" in page.content
    assert b'name="_save"' not in page.content
    response = admin_client.post(url, {"reason": "nothing happened", "action": "checkpoint.release"})
    assert response.status_code == 403
    event.refresh_from_db()
    assert event.reason == "incident 7"


def test_an_audit_event_cannot_be_deleted_even_by_a_superuser(admin_client, data):
    event = data["event"]
    assert admin_client.get(admin_url(AuditEvent, "delete", event.pk)).status_code == 403
    assert admin_client.post(admin_url(AuditEvent, "delete", event.pk), {"post": "yes"}).status_code == 403
    bulk = admin_client.post(
        admin_url(AuditEvent, "changelist"), {"action": "delete_selected", "_selected_action": [event.pk]}
    )
    assert bulk.status_code in (200, 302)
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_runs_cannot_be_deleted_through_the_admin(admin_client, data):
    run = data["run"]
    assert admin_client.post(admin_url(Run, "delete", run.pk), {"post": "yes"}).status_code == 403
    assert Run.objects.filter(pk=run.pk).exists()


def test_a_host_token_shows_its_prefix_and_never_its_hash(admin_client, data):
    token = data["token"]
    listing = admin_client.get(admin_url(HostToken, "changelist")).content.decode()
    detail = admin_client.get(admin_url(HostToken, "change", token.pk)).content.decode()
    for html in (listing, detail):
        assert token.prefix in html
        assert token.token_hash not in html
        assert token.token_hash[:12] not in html
        assert data["raw_token"] not in html


def test_a_host_token_cannot_be_found_by_its_hash(admin_client, data):
    token = data["token"]
    response = admin_client.get(admin_url(HostToken, "changelist"), {"token_hash__startswith": token.token_hash[:1]})
    assert response.status_code == 400


def test_a_host_token_cannot_be_changed_or_deleted(admin_client, data):
    token = data["token"]
    response = admin_client.post(admin_url(HostToken, "change", token.pk), {"revoked_at_0": "2020-01-01"})
    assert response.status_code == 403
    assert admin_client.post(admin_url(HostToken, "delete", token.pk), {"post": "yes"}).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


def test_staff_without_permissions_see_no_model(client, django_user_model, data):
    user = django_user_model.objects.create_user(username="intern", password="a-long-password-1", is_staff=True)
    client.force_login(user)
    assert client.get(admin_url(AuditEvent, "changelist")).status_code == 403
