"""Leases (promise 11): a live lease keeps a checkpoint from deletion and demotion, by hand or by a policy; a
deletion whose time comes waits for the lease to end; every change is audited; bad input changes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from access.roles import Role
from actions import execution, leases, services
from actions.models import DeletionJob, DeletionState, Lease
from audit.models import AuditEvent
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.services import host_token_issue
from tests.actions.conftest import as_ui, events, make_person
from tests.helpers.deletion import OPERATOR, checkpoint, make_due
from tests.helpers.locks import held_elsewhere

pytestmark = pytest.mark.django_db


def take(ckpt, who=OPERATOR, **kw):
    args = dict(checkpoint=ckpt, owner="llama-resume-7", purpose="resuming", ttl_seconds=3600, actor=who)
    args.update(kw)
    return leases.take(**args)


def test_a_live_lease_refuses_a_deletion_naming_it_and_releasing_lets_it_go(fleet, olga):
    ckpt = fleet.checkpoints[100]
    lease = take(ckpt, as_ui(olga))
    [made] = AuditEvent.objects.filter(action="lease.take")
    assert made.actor_label == "olga" and made.after["owner"] == "llama-resume-7"
    preview = services.preview(checkpoint=ckpt)
    assert preview.refusal_code == "leased" and "llama-resume-7" in preview.refusal and preview.promise == 11
    with pytest.raises(DomainError, match=r"in use: lease .* by llama-resume-7"):
        services.schedule_deletion(checkpoint=ckpt, reason="tidy", actor=as_ui(olga))
    assert not DeletionJob.objects.exists()
    leases.release(lease=lease, actor=as_ui(olga))
    assert AuditEvent.objects.filter(action="lease.release").count() == 1
    assert services.schedule_deletion(checkpoint=ckpt, reason="tidy", actor=as_ui(olga)).pk


def test_an_expired_lease_lapses_by_itself_and_the_lapse_is_audited(fleet, olga):
    ckpt = fleet.checkpoints[100]
    lease = take(ckpt, as_ui(olga), ttl_seconds=60)
    Lease.objects.filter(pk=lease.pk).update(
        taken_at=timezone.now() - timedelta(seconds=120), expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert services.preview(checkpoint=ckpt).refusal_code != "leased"
    assert leases.record_lapses() == 1 and leases.record_lapses() == 0
    assert AuditEvent.objects.filter(action="lease.lapse", actor_label="lease expiry").count() == 1
    with pytest.raises(DomainError, match="has ended"):
        leases.renew(lease=lease, ttl_seconds=600, actor=as_ui(olga))


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"ttl_seconds": -60}, "ttl_seconds must be from"),
        ({"ttl_seconds": 10 * 365 * 86400}, "ttl_seconds must be from"),
        ({"ttl_seconds": "soon"}, "whole number"),
        ({"owner": "  "}, "owner"),
        ({"purpose": "hoarding"}, "purpose must be one of"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(fleet, olga, kw, message):
    before = events()
    with pytest.raises(DomainError, match=message):
        take(fleet.checkpoints[100], as_ui(olga), **kw)
    assert not Lease.objects.exists() and events() == before


def test_a_viewer_and_a_person_of_another_team_cannot_take_one(fleet, client, settings):
    settings.CKPTFLEET_TEAM_SCOPING = True
    viewer = make_person("vic", Role.VIEWER)
    with pytest.raises(PermissionRefused):
        take(fleet.checkpoints[100], as_ui(viewer))
    outsider = make_person("otto", Role.OPERATOR)
    outsider.groups.add(Group.objects.get_or_create(name="team:nlp")[0])
    client.force_login(outsider)
    answer = client.post(
        "/api/v1/actions/leases/",
        {"checkpoint": fleet.checkpoints[100].pk, "owner": "x", "purpose": "resuming", "ttl_seconds": 600},
        content_type="application/json",
    )
    assert answer.status_code == 404, answer.content
    assert not Lease.objects.exists()


def test_the_api_takes_renews_and_releases(fleet, client, olga):
    client.force_login(olga)
    made = client.post(
        "/api/v1/actions/leases/",
        {"checkpoint": fleet.checkpoints[200].pk, "owner": "eval-3", "purpose": "evaluating", "ttl_seconds": 600},
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    lease_id = made.json()["id"]
    assert made.json()["live"] is True
    renewed = client.post(
        f"/api/v1/actions/leases/{lease_id}/renew/", {"ttl_seconds": 7200}, content_type="application/json"
    )
    assert renewed.status_code == 200 and renewed.json()["renewed_at"]
    listed = client.get(f"/api/v1/actions/leases/?checkpoint={fleet.checkpoints[200].pk}&live=true").json()
    assert [row["id"] for row in listed] == [lease_id]
    assert (
        client.post(f"/api/v1/actions/leases/{lease_id}/release/", {}, content_type="application/json").json()["live"]
        is False
    )
    bad = client.post(
        "/api/v1/actions/leases/",
        {"checkpoint": fleet.checkpoints[200].pk, "owner": "x", "purpose": "resuming", "ttl_seconds": -5},
        content_type="application/json",
    )
    assert bad.status_code == 400 and "ttl_seconds" in bad.content.decode()


def test_a_host_leases_only_what_it_holds(fleet, client):
    from tests.factories import HostFactory

    token = host_token_issue(host=fleet.nvme.host, actor=OPERATOR)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    body = {"checkpoint": fleet.checkpoints[300].pk, "owner": "resume-job", "purpose": "resuming", "ttl_seconds": 900}
    made = client.post("/api/v1/agent/leases/", body, content_type="application/json", **auth)
    assert made.status_code == 201, made.content
    assert AuditEvent.objects.get(action="lease.take").actor_label == fleet.nvme.host.name
    other = HostFactory(name="gpu-z99")
    other_auth = {"HTTP_AUTHORIZATION": f"Bearer {host_token_issue(host=other, actor=OPERATOR)}"}
    refused = client.post("/api/v1/agent/leases/", body, content_type="application/json", **other_auth)
    assert refused.status_code == 403 and Lease.objects.count() == 1
    lease_id = made.json()["id"]
    assert client.post(f"/api/v1/agent/leases/{lease_id}/release/", {}, **other_auth).status_code == 403
    assert client.post(f"/api/v1/agent/leases/{lease_id}/release/", {}, **auth).json()["live"] is False


def test_a_due_deletion_waits_for_the_lease_then_runs(s3, scanned, django_capture_on_commit_callbacks):
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    lease = take(checkpoint(100))
    make_due(job)
    with django_capture_on_commit_callbacks(execute=True):
        execution.start_due()
    job.refresh_from_db()
    assert job.state == DeletionState.SCHEDULED and job.items_deleted == 0
    assert job.execute_after >= lease.expires_at
    [wait] = AuditEvent.objects.filter(action="deletion.wait")
    assert "llama-resume-7" in wait.reason and wait.after["lease"] == lease.pk
    leases.release(lease=lease, actor=OPERATOR)
    make_due(job)
    with django_capture_on_commit_callbacks(execute=True):
        execution.start_due()
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome


def test_a_move_leaves_a_leased_checkpoint_out_and_names_the_lease(s3, scanned):
    from promotion import moves

    _, bucket = scanned
    take(checkpoint(100))
    plan = moves.move_plan(
        checkpoints=[checkpoint(100), checkpoint(200)],
        target_location=bucket.location,
        target_storage_class="GLACIER_IR",
    )
    excluded = {e.checkpoint.step: e.reason for e in plan.excluded}
    assert "llama-resume-7" in excluded[100] and [line.checkpoint.step for line in plan.lines] == [200]


def test_the_checkpoint_page_shows_the_lease_and_an_operator_can_take_and_release(fleet, client, olga):
    client.force_login(olga)
    ckpt = fleet.checkpoints[100]
    answer = client.post(
        f"/actions/checkpoints/{ckpt.pk}/lease/", {"owner": "export-job", "purpose": "exporting", "hours": "2"}
    )
    assert answer.status_code == 302
    page = client.get(f"/checkpoints/{ckpt.pk}/").content.decode()
    assert "In use: 1 live lease" in page and "export-job" in page
    lease = Lease.objects.get()
    client.post(f"/actions/leases/{lease.pk}/release/")
    assert Lease.objects.get().released_at is not None


@pytest.mark.django_db(transaction=True)  # the live server's thread sees only what is committed
def test_the_real_agent_takes_renews_and_releases_a_lease(live_server, tmp_path):
    """The agent's `lease` command, as a separate process against a live server, with the host's token file."""
    import json
    import subprocess
    import sys

    from tests.actions.conftest import build_fleet

    fleet = build_fleet()
    token_file = tmp_path / "token"
    token_file.write_text(host_token_issue(host=fleet.nvme.host, actor=OPERATOR))
    env = {"CKPTFLEET_SERVER": live_server.url, "CKPTFLEET_TOKEN_FILE": str(token_file), "PATH": "/usr/bin:/bin"}
    agent = [sys.executable, "-m", "fleet.agent", "lease"]
    ckpt = fleet.checkpoints[100].pk
    took = subprocess.run(
        [*agent, "take", str(ckpt), "--owner", "resume-7", "--ttl", "600"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert took.returncode == 0, took.stderr
    lease = json.loads(took.stdout)
    assert lease["live"] and lease["owner"] == "resume-7"
    renewed = subprocess.run(
        [*agent, "renew", str(lease["id"]), "--ttl", "1200"], env=env, capture_output=True, text=True, timeout=60
    )
    assert renewed.returncode == 0 and json.loads(renewed.stdout)["renewed_at"]
    bad = subprocess.run(
        [*agent, "take", str(ckpt), "--owner", "x", "--ttl", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode != 0 and "ckptfleet-agent" in bad.stderr
    released = subprocess.run(
        [*agent, "release", str(lease["id"])], env=env, capture_output=True, text=True, timeout=60
    )
    assert released.returncode == 0 and json.loads(released.stdout)["live"] is False
    assert [e.action for e in AuditEvent.objects.filter(action__startswith="lease.").order_by("id")] == [
        "lease.take",
        "lease.renew",
        "lease.release",
    ]


@pytest.mark.django_db(transaction=True)
def test_leasing_locks_the_checkpoint_or_lease_alone_never_its_run_or_team():
    """With 100 jobs of one run renewing at once, a lock on the shared run (or team) row would queue every renewal
    behind every other (docs/benchmarks.md, leases): a take, renew and release go through while another
    transaction holds the run's and the team's rows."""
    from django.db import connection

    from catalog.models import Checkpoint, Run, Team

    if connection.vendor != "postgresql":
        pytest.skip("row locks between connections: this runs in the PostgreSQL pass")
    team = Team.objects.create(name="locks")
    run = Run.objects.create(team=team, name="many-jobs", status="active")
    ckpt = Checkpoint.objects.create(run=run, step=100, first_seen_at=timezone.now())

    def hold_run_and_team() -> None:
        list(Run.objects.select_for_update(of=("self",)).filter(pk=run.pk))
        list(Team.objects.select_for_update(of=("self",)).filter(pk=team.pk))

    with held_elsewhere(hold_run_and_team):  # waiting for the run's row would fail here, not hang
        lease = take(ckpt)
        leases.renew(lease=lease, ttl_seconds=600, actor=OPERATOR)
        leases.release(lease=lease, actor=OPERATOR)
    assert [e.action for e in AuditEvent.objects.filter(target_id=ckpt.pk).order_by("id")] == [
        "lease.take",
        "lease.renew",
        "lease.release",
    ]
