"""The API a training job calls at its end: ``POST /api/v1/runs/{id}/status/`` and ``/api/v1/runs/status/``.

With a person's token (operator role, team scoping) and with a host's token (its own runs only); every refusal
changes nothing. The last test follows a run the API ended into the features that read its status.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from access.services import api_token_create
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Checkpoint, Run
from tests.conftest import give_roles
from tests.helpers.ingest import dcp

pytestmark = pytest.mark.django_db


def token_of(django_user_model, username: str, *roles: str) -> dict[str, str]:
    user = django_user_model.objects.create_user(username=username, password="a-long-password-1")
    give_roles(user, *roles)
    _, raw = api_token_create(user=user, actor=Actor.command(label="tests"))
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def post(client, url: str, body, auth: dict):
    return client.post(url, data=json.dumps(body), content_type="application/json", **auth)


def events(run: Run) -> int:
    return AuditEvent.objects.filter(action="run.status", target_id=run.pk).count()


@pytest.fixture
def gpu(make_host):
    return make_host()


@pytest.fixture
def run(gpu, push) -> Run:
    push(gpu, dcp(100))
    return Run.objects.get(name="llama-7b")


def unchanged(run: Run) -> bool:
    run.refresh_from_db()
    return run.status == "active" and run.status_source == "" and events(run) == 0


def test_an_operators_token_ends_the_run(client, run, django_user_model):
    auth = token_of(django_user_model, "olga", "operator")
    r = post(client, f"/api/v1/runs/{run.pk}/status/", {"status": "finished", "reason": "target loss"}, auth)
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["status"] == "finished" and body["status_source"] == "api" and body["changed"] is True
    assert body["status_by_label"] == "olga" and body["status_reason"] == "target loss"
    event = AuditEvent.objects.get(action="run.status", target_id=run.pk)
    assert event.source == "api" and event.before["status"] == "active" and event.after["status"] == "finished"
    again = post(client, f"/api/v1/runs/{run.pk}/status/", {"status": "finished"}, auth)
    assert again.status_code == 200 and again.json()["changed"] is False and events(run) == 1
    listed = client.get(f"/api/v1/runs/{run.pk}/", **auth).json()
    assert listed["status"] == "finished" and listed["status_source"] == "api"


def test_a_viewers_token_is_refused(client, run, django_user_model):
    auth = token_of(django_user_model, "vic", "viewer")
    r = post(client, f"/api/v1/runs/{run.pk}/status/", {"status": "failed"}, auth)
    assert r.status_code == 403 and "operator role" in r.json()["detail"]
    assert unchanged(run)


def test_a_person_scoped_to_another_team_does_not_find_the_run(client, run, django_user_model, settings):
    settings.CKPTFLEET_TEAM_SCOPING = True
    auth = token_of(django_user_model, "otto", "operator", "team:vision")
    r = post(client, f"/api/v1/runs/{run.pk}/status/", {"status": "failed"}, auth)
    assert r.status_code == 404
    r = post(client, "/api/v1/runs/status/", {"team": "llm", "run": "llama-7b", "status": "failed"}, auth)
    assert r.status_code == 404
    assert unchanged(run)


def test_a_bad_status_is_a_400_that_changes_nothing(client, run, django_user_model):
    auth = token_of(django_user_model, "olga", "operator")
    for body in ({"status": "done"}, {}, {"status": "failed", "reason": "x" * 501}, {"status": 3}):
        r = post(client, f"/api/v1/runs/{run.pk}/status/", body, auth)
        assert r.status_code == 400, (body, r.content)
        assert set(r.json()) >= {"error", "detail"}
    assert unchanged(run)


def test_an_unknown_run_is_a_404(client, run, django_user_model):
    auth = token_of(django_user_model, "olga", "operator")
    assert post(client, f"/api/v1/runs/{run.pk + 100}/status/", {"status": "failed"}, auth).status_code == 404
    r = post(client, "/api/v1/runs/status/", {"team": "llm", "run": "nope", "status": "failed"}, auth)
    assert r.status_code == 404 and "llm/nope" in r.json()["detail"]
    assert unchanged(run)


def test_a_job_that_knows_only_its_names_ends_its_run(client, run, django_user_model):
    auth = token_of(django_user_model, "olga", "operator")
    r = post(
        client, "/api/v1/runs/status/", {"team": "llm", "run": "llama-7b", "status": "failed", "reason": "OOM"}, auth
    )
    assert r.status_code == 200, r.content
    run.refresh_from_db()
    assert (run.status, run.status_reason, run.status_source) == ("failed", "OOM", "api")


def test_the_hosts_token_ends_a_run_it_stores(client, run, gpu):
    r = post(client, "/api/v1/runs/status/", {"team": "llm", "run": "llama-7b", "status": "finished"}, gpu.auth())
    assert r.status_code == 200, r.content
    run.refresh_from_db()
    assert (run.status, run.status_source, run.status_by_label) == ("finished", "api", "gpu-a01")
    assert AuditEvent.objects.get(action="run.status").actor_kind == "host"


def test_it_rejects_a_token_of_another_host(client, run, make_host):
    other = make_host("gpu-b02", "/mnt/nvme1/checkpoints")
    r = post(client, f"/api/v1/runs/{run.pk}/status/", {"status": "finished"}, other.auth())
    assert r.status_code == 403 and "gpu-b02 holds no copy" in r.json()["detail"]
    assert unchanged(run)


def test_a_run_the_api_ends_lights_up_the_nvme_flag_the_waste_line_and_the_tiering_scope(
    client, run, gpu, push, signed_in, settings
):
    settings.NVME_FINISHED_DAYS = 14
    Checkpoint.objects.filter(run=run).update(first_seen_at=timezone.now() - timedelta(days=20))
    flagged = f"/placement/?flag=finished_on_nvme&run={run.pk}"
    assert signed_in.get(flagged).context["items"] == []

    def waste_stored() -> int:
        page = signed_in.get("/spend/")
        assert page.status_code == 200
        rows = {r["key"]: r for r in page.context["waste"].rows}
        return rows["finished_on_nvme"]["stored"]

    def tiering_runs() -> list[str]:
        page = signed_in.get("/retention/tiering/")
        assert page.status_code == 200
        whatif = page.context["whatif"]
        assert whatif is not None, page.context["form"].errors
        return [r.run.name for r in whatif.runs]

    assert waste_stored() == 0 and tiering_runs() == []

    r = post(client, f"/api/v1/runs/{run.pk}/status/", {"status": "finished", "reason": "done"}, gpu.auth())
    assert r.status_code == 200, r.content

    page = signed_in.get(flagged)
    assert [ck.step for _, ck, _ in page.context["items"]] == [100]
    assert "on NVMe at gpu-a01:/mnt/nvme0/checkpoints" in page.content.decode()
    assert waste_stored() == 4096 * 2 + 900
    assert "Finished runs still on NVMe" in signed_in.get("/spend/").content.decode()
    assert tiering_runs() == ["llama-7b"]
    detail = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "Finished · api <time" in detail and "(by gpu-a01)" in detail and "“done”" in detail
    listed = signed_in.get("/runs/?status=finished").content.decode()
    assert "llama-7b" in listed and "· api" in listed
    assert "llama-7b" not in signed_in.get("/runs/?status=active").content.decode()
