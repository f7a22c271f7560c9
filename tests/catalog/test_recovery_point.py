"""Recovery point in hours, steps and GPU-hours, objectives per team and run, and lineage set by an operator:
the service, the API with roles and bad input (nothing changes), the fleet list, and a deletion's confirmation."""

from __future__ import annotations

import json
import time

import pytest
from django.utils import timezone

from actions.models import DeletionJob
from audit.models import AuditEvent
from catalog.models import Checkpoint, Run, Team
from catalog.recovery_point import DEFAULT_RPO_HOURS, recovery_point_of
from tests.catalog.test_lifecycle_api import post, token_of
from tests.helpers.ingest import dcp

pytestmark = pytest.mark.django_db


def fresh(step: int, run: str, *, ranks: int = 2, missing: int | None = None, age_h: float = 0.0) -> list[dict]:
    """A DCP checkpoint saved ``age_h`` hours ago."""
    files = dcp(step, ranks, missing=missing, run=run)
    for f in files:
        f["mtime"] = time.time() - age_h * 3600
    return files


@pytest.fixture
def gpu(make_host):
    return make_host()


@pytest.fixture
def runs(gpu, push):
    """llama-7b: step 100 complete 30 h ago, step 200 partial (the newest seen); 4 ranks.
    llama-8b: step 10 complete 50 h ago, 2 ranks. A run of another team (vision/resnet): 1 h ago."""
    other = fresh(5, "resnet", age_h=1)
    for f in other:
        f["path"] = f["path"].replace("llm/", "vision/")
    # One inventory: a host's inventory is the whole of what it holds.
    llama = fresh(100, "llama-7b", ranks=4, age_h=30) + fresh(200, "llama-7b", ranks=4, missing=1, age_h=1)
    push(gpu, llama + fresh(10, "llama-8b", age_h=50) + other)
    return {r.name: r for r in Run.objects.select_related("team")}


@pytest.fixture
def viewer(django_user_model):
    return token_of(django_user_model, "vic", "viewer")


@pytest.fixture
def operator(django_user_model):
    return token_of(django_user_model, "olga", "operator")


def test_the_recovery_point_counts_hours_steps_and_gpu_hours(runs):
    point = recovery_point_of(runs["llama-7b"])
    assert point.checkpoint.step == 100 and point.highest_step == 200 and point.lost_steps == 100
    assert point.hours == pytest.approx(30, abs=0.05)
    assert (point.gpus, point.gpus_source) == (4, "world size")
    assert point.gpu_hours == pytest.approx(120, abs=0.5)
    assert (point.objective_hours, point.objective_source, point.over) == (DEFAULT_RPO_HOURS, "default", True)


def test_an_ended_run_loses_only_until_its_last_save_and_is_not_listed(runs, client, viewer):
    run = runs["llama-7b"]
    Run.objects.filter(pk=run.pk).update(status="finished")
    run.refresh_from_db()
    point = recovery_point_of(run)
    assert point.lost_hours == pytest.approx(29, abs=0.05) and not point.active
    names = [p["name"] for p in client.get("/api/v1/recovery/points/", **viewer).json()["results"]]
    assert names == ["llama-8b"]


def test_the_fleet_list_is_worst_first_by_gpu_hours(runs, client, viewer):
    r = client.get("/api/v1/recovery/points/", **viewer)
    assert r.status_code == 200
    rows = r.json()["results"]
    # llama-7b: 30 h x 4 GPUs = 120 GPU-h; llama-8b: 50 h x 2 = 100 GPU-h; resnet is within 24 h.
    assert [(p["name"], round(p["lost_gpu_hours"])) for p in rows] == [("llama-7b", 120), ("llama-8b", 100)]
    assert rows[0]["gpus_source"] == "world size" and rows[0]["lost_steps"] == 100 and rows[0]["over_objective"]


def test_an_operator_sets_gpus_and_objectives_audited(runs, client, operator):
    run = runs["llama-8b"]
    r = post(client, f"/api/v1/runs/{run.pk}/rpo/", {"hours": 72, "reason": "cheap to redo"}, operator)
    assert r.status_code == 200, r.content
    assert (r.json()["objective_hours"], r.json()["objective_source"], r.json()["over_objective"]) == (72, "run", False)
    team = Team.objects.get(name="llm")
    r = post(client, f"/api/v1/recovery/teams/{team.pk}/rpo/", {"hours": 12}, operator)
    assert r.status_code == 200 and r.json()["rpo_hours"] == 12
    assert recovery_point_of(Run.objects.select_related("team").get(name="llama-7b")).objective_source == "team"
    r = post(client, f"/api/v1/runs/{run.pk}/gpus/", {"gpus": 64}, operator)
    assert r.status_code == 200
    assert (r.json()["gpus"], r.json()["gpus_source"]) == (64, "operator")  # a person's word for this run wins
    run.refresh_from_db()
    assert run.operator_gpus == 64
    actions = sorted(AuditEvent.objects.filter(action__in=("run.rpo", "team.rpo", "run.gpus")).values_list("action"))
    assert actions == [("run.gpus",), ("run.rpo",), ("team.rpo",)]
    r = post(client, f"/api/v1/runs/{run.pk}/rpo/", {"hours": None}, operator)
    assert r.json()["objective_source"] == "team"


def test_the_operators_gpus_count_when_nothing_else_says(db, client, operator):
    team = Team.objects.create(name="llm")
    run = Run.objects.create(team=team, name="planned")
    assert recovery_point_of(run).gpus is None
    r = post(client, f"/api/v1/runs/{run.pk}/gpus/", {"gpus": "16"}, operator)
    assert (r.json()["gpus"], r.json()["gpus_source"]) == (16, "operator")


@pytest.mark.parametrize(
    ("url", "body", "word"),
    [
        ("gpus", {"gpus": -8}, "gpus must be a whole number"),
        ("gpus", {"gpus": 0}, "gpus must be a whole number"),
        ("gpus", {"gpus": "lots"}, "gpus must be a whole number"),
        ("gpus", {"gpus": True}, "gpus must be a whole number"),
        ("rpo", {"hours": 0}, "above 0"),
        ("rpo", {"hours": -3}, "above 0"),
        ("rpo", {"hours": "soon"}, "above 0"),
        ("rpo", {"hours": "nan"}, "above 0"),
        ("parent", {"checkpoint": "step 100"}, "checkpoint must be a checkpoint id"),
        ("parent", {"checkpoint": 999999}, "does not exist"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(runs, client, operator, url, body, word):
    run = runs["llama-8b"]
    r = post(client, f"/api/v1/runs/{run.pk}/{url}/", body, operator)
    assert r.status_code == 400, r.content
    assert word in json.dumps(r.json())
    run.refresh_from_db()
    assert (run.operator_gpus, run.rpo_hours, run.parent_checkpoint_id) == (None, None, None)
    assert not AuditEvent.objects.filter(action__in=("run.rpo", "run.gpus", "run.parent")).exists()


def test_a_team_objective_of_zero_is_refused(runs, client, operator):
    team = Team.objects.get(name="llm")
    r = post(client, f"/api/v1/recovery/teams/{team.pk}/rpo/", {"hours": 0}, operator)
    assert r.status_code == 400 and "above 0" in json.dumps(r.json())
    team.refresh_from_db()
    assert team.rpo_hours is None and not AuditEvent.objects.filter(action="team.rpo").exists()


def test_a_viewer_reads_but_may_not_set(runs, client, viewer):
    run = runs["llama-8b"]
    assert client.get(f"/api/v1/runs/{run.pk}/recovery-point/", **viewer).status_code == 200
    for url, body in (("gpus", {"gpus": 8}), ("rpo", {"hours": 6}), ("parent", {"checkpoint": None})):
        assert post(client, f"/api/v1/runs/{run.pk}/{url}/", body, viewer).status_code == 403
    run.refresh_from_db()
    assert (run.operator_gpus, run.rpo_hours) == (None, None)


def test_a_parent_in_a_team_the_person_cannot_see_is_not_found(runs, client, settings, django_user_model):
    settings.CKPTFLEET_TEAM_SCOPING = True
    auth = token_of(django_user_model, "lena", "operator", "team:llm")
    resnet = Checkpoint.objects.get(run__name="resnet")
    run = runs["llama-8b"]
    r = post(client, f"/api/v1/runs/{run.pk}/parent/", {"checkpoint": resnet.pk}, auth)
    assert r.status_code == 400 and "does not exist" in json.dumps(r.json())
    run.refresh_from_db()
    assert run.parent_checkpoint_id is None and not AuditEvent.objects.filter(action="run.parent").exists()
    # And the run of the other team is not found at all.
    assert client.get(f"/api/v1/runs/{runs['resnet'].pk}/recovery-point/", **auth).status_code == 404


def test_an_operator_names_a_parent_and_the_deletion_needs_the_flag(runs, client, operator):
    child, parent = runs["llama-8b"], Checkpoint.objects.get(run__name="llama-7b", step=100)
    r = post(
        client, f"/api/v1/runs/{child.pk}/parent/", {"checkpoint": parent.pk, "reason": "SFT of step 100"}, operator
    )
    assert r.status_code == 200, r.content
    assert r.json()["parents"][0]["checkpoint"] == parent.pk and r.json()["parent_source"] == "operator"
    lineage = client.get(f"/api/v1/runs/{parent.run_id}/lineage/", **operator).json()
    assert [c["name"] for c in lineage["children"]] == ["llama-8b"]
    # A cycle is refused.
    own = Checkpoint.objects.get(run=child, step=10)
    r = post(client, f"/api/v1/runs/{parent.run_id}/parent/", {"checkpoint": own.pk}, operator)
    assert r.status_code == 400 and "cycle" in json.dumps(r.json())

    preview = client.get(f"/api/v1/actions/deletions/preview/?checkpoint={parent.pk}", **operator).json()
    assert preview["child_runs"] == [{"id": child.pk, "team": "llm", "name": "llama-8b"}]
    body = {"checkpoint": parent.pk, "reason": "superseded"}
    r = post(client, "/api/v1/actions/deletions/", body, operator)
    assert r.status_code == 400 and "llm/llama-8b" in json.dumps(r.json()), r.content
    assert not DeletionJob.objects.exists()
    r = post(client, "/api/v1/actions/deletions/", {**body, "confirm_children": True}, operator)
    assert r.status_code == 201, r.content


def test_the_recovery_point_does_not_move_backwards_in_time(runs):
    point = recovery_point_of(runs["llama-7b"], now=timezone.now())
    assert point.saved_at is not None and point.saved_at < timezone.now()


def test_the_command_sets_and_shows_audited(runs):
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("fleet_recovery", "gpus", "llm/llama-8b", "32", "--reason", "4 nodes", stdout=out)
    call_command("fleet_recovery", "team-rpo", "llm", "100", stdout=out)
    call_command("fleet_recovery", "show", "llm/llama-8b", stdout=out)
    assert "ok 50.0 h since step 10 (objective 100 h, team)" in out.getvalue()
    assert "32 GPUs (operator)" in out.getvalue()
    event = AuditEvent.objects.get(action="run.gpus")
    assert (event.source, event.after["gpus"], event.reason) == ("command", 32, "4 nodes")
    with pytest.raises(CommandError, match="above 0"):
        call_command("fleet_recovery", "rpo", "llm/llama-8b", "-1", stdout=out)
    assert Run.objects.get(name="llama-8b").rpo_hours is None
    call_command("fleet_recovery", "over", stdout=out)
    assert out.getvalue().splitlines()[-1] == "every active run is within its objective"


def test_the_deletion_page_names_the_runs_and_asks_for_the_checkbox(runs, client, django_user_model):
    from tests.conftest import give_roles

    olga = django_user_model.objects.create_user(username="olga2", password="a-long-password-1")
    give_roles(olga, "operator")
    client.force_login(olga)
    parent = Checkpoint.objects.get(run__name="llama-7b", step=100)
    Run.objects.filter(name="llama-8b").update(parent_checkpoint=parent, parent_ref="llm/llama-7b@100")
    url = f"/actions/checkpoints/{parent.pk}/delete/"
    page = client.get(url).content.decode()
    assert 'id="child-runs"' in page and "llm/llama-8b" in page and 'name="confirm_children"' in page
    r = client.post(url, {"reason": "superseded"}, follow=True)
    assert "Not scheduled: run llm/llama-8b started from" in r.content.decode()
    assert not DeletionJob.objects.exists()
    client.post(url, {"reason": "superseded", "confirm_children": "yes"})
    assert DeletionJob.objects.filter(checkpoint=parent).count() == 1
    # The run page of the parent lists the fine-tune; the fine-tune's names its parent.
    assert "llm/llama-8b" in client.get(f"/runs/{parent.run_id}/").content.decode()
    child_page = client.get(f"/runs/{runs['llama-8b'].pk}/").content.decode()
    assert f'href="/checkpoints/{parent.pk}/"' in child_page or "llm/llama-7b step 100" in child_page


def test_the_cost_of_resuming_from_an_older_checkpoint(runs):
    from catalog.recovery_point import resume_cost

    point = recovery_point_of(runs["llama-7b"])
    newest = resume_cost(point, point.checkpoint)
    assert newest.lost_steps == 100 and newest.lost_hours == pytest.approx(30, abs=0.05)
    assert newest.gpu_hours == pytest.approx(120, abs=0.5) and newest.gpus_source == "world size"
