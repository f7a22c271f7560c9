"""Team scoping: with CKPTFLEET_TEAM_SCOPING on, a person in a team's group sees only that team's runs."""

from __future__ import annotations

import pytest

from catalog.models import Checkpoint, Run, Team
from tests.conftest import give_roles, queries_for


@pytest.fixture
def two_teams(db):
    vision = Run.objects.create(team=Team.objects.create(name="vision"), name="vit-huge")
    speech = Run.objects.create(team=Team.objects.create(name="speech"), name="whisper-xl")
    return {
        "vision": (vision, Checkpoint.objects.create(run=vision, step=100)),
        "speech": (speech, Checkpoint.objects.create(run=speech, step=200)),
    }


@pytest.fixture
def scoping(settings):
    settings.CKPTFLEET_TEAM_SCOPING = True


def in_team(signed_in_as, team: str, role: str = "viewer"):
    client = signed_in_as(role, username=f"{role}-of-{team}")
    give_roles(client.user, f"team:{team}")
    return client


def sees(client, two_teams) -> dict[str, dict[str, int]]:
    """What ``client`` gets for each team's run list entry, run page, checkpoint page and API objects."""
    runs_html = client.get("/runs/").content.decode()
    api_runs = {r["name"] for r in client.get("/api/v1/runs/").json()["results"]}
    api_ckpts = {c["id"] for c in client.get("/api/v1/checkpoints/").json()["results"]}
    out = {}
    for team, (run, ckpt) in two_teams.items():
        out[team] = {
            "listed": run.name in runs_html,
            "run": client.get(f"/runs/{run.pk}/").status_code,
            "checkpoint": client.get(f"/checkpoints/{ckpt.pk}/").status_code,
            "api_listed": run.name in api_runs and ckpt.pk in api_ckpts,
            "api_run": client.get(f"/api/v1/runs/{run.pk}/").status_code,
            "api_checkpoint": client.get(f"/api/v1/checkpoints/{ckpt.pk}/").status_code,
        }
    return out


VISIBLE = {"listed": True, "run": 200, "checkpoint": 200, "api_listed": True, "api_run": 200, "api_checkpoint": 200}
HIDDEN = {"listed": False, "run": 404, "checkpoint": 404, "api_listed": False, "api_run": 404, "api_checkpoint": 404}


def test_a_team_member_sees_only_their_teams_runs_everywhere(two_teams, scoping, signed_in_as):
    seen = sees(in_team(signed_in_as, "vision"), two_teams)
    assert seen == {"vision": VISIBLE, "speech": HIDDEN}


def test_a_member_of_two_teams_sees_both(two_teams, scoping, signed_in_as):
    client = in_team(signed_in_as, "vision")
    give_roles(client.user, "team:speech")
    assert sees(client, two_teams) == {"vision": VISIBLE, "speech": VISIBLE}


def test_without_scoping_a_team_member_sees_every_run(two_teams, signed_in_as):
    assert sees(in_team(signed_in_as, "vision"), two_teams) == {"vision": VISIBLE, "speech": VISIBLE}


def test_people_in_no_team_and_admins_are_not_scoped(two_teams, scoping, signed_in_as):
    assert sees(signed_in_as("viewer"), two_teams) == {"vision": VISIBLE, "speech": VISIBLE}
    assert sees(in_team(signed_in_as, "vision", role="admin"), two_teams) == {"vision": VISIBLE, "speech": VISIBLE}


def test_scoping_adds_no_query_per_run(two_teams, scoping, signed_in_as):
    client = in_team(signed_in_as, "vision")
    one = queries_for(client, "/runs/")
    team = Team.objects.get(name="vision")
    for i in range(10):
        Run.objects.create(team=team, name=f"vit-{i}")
    assert queries_for(client, "/runs/") == one
