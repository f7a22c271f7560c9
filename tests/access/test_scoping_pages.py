"""Team scoping beyond the run pages: spend, placement, orphans, recovery, queues, audit, jobs, actions.

Two teams, each with a run that has a complete and a partial checkpoint, usage rolled up and priced,
a scheduled deletion, a hold, a pin, a promotion and a retention policy. A scoped member of team vision must see none of
team speech's run on any page or API, get 404 for its detail URLs, and see totals of vision alone.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.utils import timezone

from access.scoping import restrict_events
from actions import services
from actions.models import DeletionJob, Hold, Pin
from audit.actor import Actor
from audit.choices import EventSource
from catalog.choices import CopyState
from catalog.models import ShardFile
from fleet.pricebook import utc_today
from promotion.models import PromotionJob
from retention import services as retention
from spend.usage import usage_refresh
from tests.conftest import give_roles
from tests.helpers.catalog import make_copy, make_location, make_run
from tests.helpers.usage import flat_prices

pytestmark = pytest.mark.django_db

MINE, THEIRS = "vit-huge", "whisper-xl"  # the run names each page is searched for
GIB = 1024**3


@pytest.fixture
def scoping(settings):
    settings.CKPTFLEET_TEAM_SCOPING = True


@pytest.fixture
def fleet(django_user_model):
    """Both teams' runs at one NVMe location, with usage, a deletion, a hold, a pin and a promotion each."""
    nvme = make_location("gpu-a01")
    flat_prices(nvme="0.10")
    olga = django_user_model.objects.create_user(username="olga", password="a-long-password-1")
    give_roles(olga, "operator")
    actor = Actor.person(olga, EventSource.UI)
    out = {}
    for team, name, size in (("vision", MINE, GIB), ("speech", THEIRS, 3 * GIB)):
        run = make_run(team, name)
        complete = make_copy(run, 100, nvme, files=2, size=size)
        partial = make_copy(run, 200, nvme, state=CopyState.PARTIAL, reasons=[f"rank 1 of {name} is missing"])
        deletion = services.schedule_deletion(checkpoint=complete.checkpoint, reason=f"superseded {name}", actor=actor)
        hold = services.hold(
            run=run, checkpoint=partial.checkpoint, reason="litigation", case_ref=f"CASE-{name}", actor=actor
        )
        pin = services.pin(checkpoint=partial.checkpoint, reason=f"keep {name}", actor=actor)
        policy = retention.policy_create(actor=actor, name=f"keep 3 of {name}", run=run, keep_last=3, reason="tests")
        now = timezone.now()
        promotion = PromotionJob.objects.create(
            checkpoint=complete.checkpoint, source_copy=complete, target_location=nvme, target_tier="nvme",
            method="copy", state="copying", reason=f"incident for {name}", requested_label="olga",
            requested_at=now, bytes_total=2 * size, bytes_done=size,
        )  # fmt: skip
        out[team] = {
            "run": run,
            "checkpoint": complete.checkpoint,
            "partial": partial.checkpoint,
            "copy": complete,
            "deletion": deletion,
            "hold": hold,
            "pin": pin,
            "promotion": promotion,
            "policy": policy,
            "bytes": complete.bytes + partial.bytes,
        }
    # A stray file in speech's directory that belongs to no checkpoint: an orphan of no run.
    ShardFile.objects.create(
        location=nvme, path=f"speech/{THEIRS}/stray.tmp", size=100, mtime=timezone.now(),
        first_seen_at=timezone.now(), changed_at=timezone.now(),
    )  # fmt: skip
    nvme.last_applied_at = timezone.now()
    nvme.save(update_fields=["last_applied_at"])
    usage_refresh(location=nvme, day=utc_today())
    return out


def in_team(signed_in_as, team: str, *roles: str):
    client = signed_in_as(*(roles or ("viewer",)), username=f"{'-'.join(roles or ('viewer',))}-of-{team}")
    give_roles(client.user, f"team:{team}")
    return client


def text(client, url: str, status: int = 200) -> str:
    response = client.get(url, follow=True)  # the recovery search goes straight to a run when one matches
    assert response.status_code == status, (url, response.status_code)
    if hasattr(response, "streaming_content"):
        return b"".join(response.streaming_content).decode()
    return response.content.decode()


def problems_of(check, urls) -> list[str]:
    """Every URL whose check fails, with why: one test run names them all."""
    found = []
    for url in urls:
        try:
            check(url)
        except AssertionError as exc:
            found.append(f"{url}: {exc}")
    return found


# Pages and API lists that show per-run data, each with something of both runs when nobody is scoped.
LISTS = [
    "/",
    "/spend/",
    "/spend/runs/",
    "/api/v1/spend/by-run/",
    "/api/v1/spend/growing-runs/",
    "/placement/",
    "/api/v1/checkpoints/flagged/?flag=newest_on_one_host",
    "/orphans/",
    "/api/v1/orphans/",
    "/recovery/?q=-",
    "/queue/copies/?kind=partial",
    "/audit/",
    "/audit/export.csv",
    "/api/v1/audit/",
    "/jobs/",
    "/api/v1/jobs/",
    "/actions/deletions/?show=all",
    "/api/v1/actions/deletions/",
    "/api/v1/actions/holds/",
    "/api/v1/actions/pins/",
    "/promotions/",
    "/api/v1/promotions/",
    "/retention/",
    "/api/v1/retention/simulate/",
    "/retention/tiering/?to_class=GLACIER_IR&from_tier=nvme",
    "/api/v1/retention/tiering/?finished_only=false",
    "/retention/policies/",
    "/api/v1/retention/policies/",
]


def detail_urls(team: dict) -> list[str]:
    run, ckpt, deletion, promotion = team["run"], team["checkpoint"], team["deletion"], team["promotion"]
    return [
        f"/spend/runs/{run.pk}/",
        f"/api/v1/spend/?run={run.pk}",
        f"/api/v1/spend/run-steps/?run={run.pk}",
        f"/placement/?run={run.pk}",
        f"/recovery/{run.pk}/",
        f"/api/v1/recovery/{run.pk}/",
        f"/actions/deletions/{deletion.pk}/",
        f"/api/v1/actions/deletions/{deletion.pk}/",
        f"/api/v1/actions/deletions/{deletion.pk}/items/",
        f"/api/v1/actions/holds/{team['hold'].pk}/",
        f"/api/v1/actions/pins/{team['pin'].pk}/",
        f"/api/v1/actions/deletions/preview/?checkpoint={ckpt.pk}",
        f"/actions/checkpoints/{ckpt.pk}/delete/",
        f"/promotions/{promotion.pk}/",
        f"/promotions/{promotion.pk}/progress.json",
        f"/api/v1/promotions/{promotion.pk}/",
        f"/retention/?run={run.pk}",
        f"/api/v1/retention/simulate/?run={run.pk}",
        f"/retention/policies/{team['policy'].pk}/",
        f"/api/v1/retention/policies/{team['policy'].pk}/",
        f"/api/v1/retention/policies/{team['policy'].pk}/dry-run/",
    ]


def test_without_scoping_every_list_shows_both_teams_runs(fleet, signed_in_as):
    client = in_team(signed_in_as, "vision", "finance")

    def both(url):
        page = text(client, url)
        if url.startswith(("/orphans/", "/api/v1/orphans/")):
            assert f"speech/{THEIRS}" in page, "the stray file's directory is listed"
        assert MINE in page and THEIRS in page, "both runs are shown"

    details = [url for team in fleet.values() for url in detail_urls(team)]
    found = problems_of(both, LISTS) + problems_of(lambda url: text(client, url), details)
    assert found == [], "\n".join(p[:300] for p in found)


def test_a_scoped_member_sees_none_of_another_teams_runs_on_any_page_or_api(fleet, scoping, signed_in_as):
    client = in_team(signed_in_as, "vision", "finance")

    def only_mine(url):
        page = text(client, url)
        assert THEIRS not in page and f"CASE-{THEIRS}" not in page, "the other team's run is not shown"
        assert f"speech/{THEIRS}" not in page, "nor its directory"
        assert MINE in page, "the page is not merely empty"

    found = problems_of(only_mine, LISTS)
    assert found == [], "\n".join(p[:300] for p in found)
    assert problems_of(lambda url: text(client, url), detail_urls(fleet["vision"])) == []
    assert problems_of(lambda url: text(client, url, status=404), detail_urls(fleet["speech"])) == []


def test_a_scoped_members_spend_totals_are_of_their_team_alone(fleet, scoping, signed_in_as):
    scoped = in_team(signed_in_as, "vision", "finance")
    everyone = signed_in_as("finance", username="fleet-finance")
    mine = scoped.get("/api/v1/spend/").json()
    fleet_wide = everyone.get("/api/v1/spend/").json()
    assert mine["stored_bytes"] == fleet["vision"]["bytes"]
    assert fleet_wide["stored_bytes"] > fleet["vision"]["bytes"] + fleet["speech"]["bytes"] - 1  # plus the stray
    assert Decimal(mine["spend"]) < Decimal(fleet_wide["spend"])
    by_team = scoped.get("/api/v1/spend/by-team/").json()
    assert [r["team"] for r in by_team["rows"]] == ["vision"]
    assert scoped.get("/api/v1/overview/").json()["stored_bytes"] == fleet["vision"]["bytes"]
    # The export is the same table: a CSV of vision's runs only.
    csv_text = text(scoped, "/api/v1/spend/by-run/?format=csv")
    assert MINE in csv_text and THEIRS not in csv_text
    # Asking for the other team by id gives nothing of it.
    speech = fleet["speech"]["run"].team_id
    assert THEIRS not in text(scoped, f"/spend/?team={speech}")
    assert scoped.get(f"/api/v1/spend/by-run/?team={speech}").json()["rows"] == []


def test_a_scoped_operator_cannot_act_on_another_teams_run_and_learns_nothing_of_it(fleet, scoping, signed_in_as):
    client = in_team(signed_in_as, "vision", "operator", "approver")
    speech = fleet["speech"]
    for url, data in (
        (f"/actions/checkpoints/{speech['checkpoint'].pk}/pin/", {"reason": "mine now"}),
        (f"/actions/pins/{speech['pin'].pk}/unpin/", {"reason": "x"}),
        (f"/actions/runs/{speech['run'].pk}/hold/", {"reason": "x", "case_ref": "X-1"}),
        (f"/actions/holds/{speech['hold'].pk}/release/", {"reason": "x"}),
        (f"/actions/checkpoints/{speech['checkpoint'].pk}/delete/", {"reason": "x"}),
        (f"/actions/deletions/{speech['deletion'].pk}/approve/", {}),
        (f"/actions/deletions/{speech['deletion'].pk}/cancel/", {"reason": "x"}),
    ):
        assert client.post(url, data).status_code == 404, url
    api = [
        ("/api/v1/actions/pins/", {"checkpoint": speech["checkpoint"].pk, "reason": "x"}),
        (f"/api/v1/actions/pins/{speech['pin'].pk}/unpin/", {"reason": "x"}),
        ("/api/v1/actions/holds/", {"run": speech["run"].pk, "reason": "x", "case_ref": "X-1"}),
        (f"/api/v1/actions/holds/{speech['hold'].pk}/release/", {"reason": "x"}),
        ("/api/v1/actions/deletions/", {"checkpoint": speech["checkpoint"].pk, "reason": "x"}),
        (f"/api/v1/actions/deletions/{speech['deletion'].pk}/approve/", {}),
        (f"/api/v1/actions/deletions/{speech['deletion'].pk}/cancel/", {"reason": "x"}),
    ]
    for url, data in api:
        assert client.post(url, data, content_type="application/json").status_code == 404, url
    assert Pin.objects.filter(checkpoint__run=speech["run"], unpinned_at__isnull=True).count() == 1
    assert Hold.objects.filter(run=speech["run"], released_at__isnull=True).count() == 1
    assert DeletionJob.objects.get(pk=speech["deletion"].pk).state == speech["deletion"].state


def test_live_progress_of_another_teams_job_is_not_reported(fleet, scoping, signed_in_as):
    client = in_team(signed_in_as, "vision")
    keys = [f"{kind}:{fleet[team][kind].pk}" for team in fleet for kind in ("deletion", "promotion")]
    got = {j["key"] for j in client.get("/jobs/progress.json", {"job": keys}).json()["jobs"]}
    assert got == {f"deletion:{fleet['vision']['deletion'].pk}", f"promotion:{fleet['vision']['promotion'].pk}"}


def test_a_scoped_member_still_sees_the_fleets_own_events(fleet, scoping, signed_in_as):
    """Events of no run (a location added, a price) are the fleet's, and stay in the trail for everyone."""
    from django.db import transaction

    from audit.services import audit_record

    with transaction.atomic():
        audit_record(
            actor_kind="system", actor_label="tests", source="command", action="location.add",
            target_type="location", target_id=1, target_label="gpu-z99:/scratch",
        )  # fmt: skip
    page = text(in_team(signed_in_as, "vision"), "/audit/")
    assert "gpu-z99:/scratch" in page


def test_a_scoped_members_audit_total_counts_only_the_events_they_see(fleet, scoping, signed_in_as):
    from audit.models import AuditChainHead, AuditEvent

    client = in_team(signed_in_as, "vision")
    visible = restrict_events(AuditEvent.objects.all(), client.user).count()
    everything = AuditChainHead.objects.get(pk=1).count
    assert 0 < visible < everything, "the other team's run has events the member does not see"
    assert f"{visible} events in all" in text(client, "/audit/")
    assert f"{everything} events in all" in text(signed_in_as("viewer", username="fleet-viewer"), "/audit/")


def test_a_scoped_member_sees_that_the_chain_held_but_not_how_long_it_is(fleet, scoping, signed_in_as):
    admin = signed_in_as("admin", username="fleet-admin")
    admin.post("/audit/verify/")
    assert re.search(r"Intact.*: \d+ events checked", text(admin, "/audit/"), re.S)
    page = text(in_team(signed_in_as, "vision"), "/audit/")
    assert "the whole trail, every team's events, checked" in page
    assert not re.search(r"\d+ events checked", page)


def test_a_scoped_member_sees_the_last_anchor_but_not_the_chains_length_in_it(
    fleet, scoping, signed_in_as, audit_anchor_dir
):
    from audit.anchors import anchor_write

    [anchor] = anchor_write()
    assert f"event {anchor.count:,} (hash" in text(signed_in_as("admin", username="fleet-admin"), "/audit/")
    page = text(in_team(signed_in_as, "vision"), "/audit/")
    assert "Anchored</span> Last anchor" in page and "(hash" in page
    assert f"event {anchor.count:,}" not in page


def team_options(page: str) -> set[str]:
    """The values of the team select's options, but "" (every team)."""
    select = page.split('name="team"', 1)[1].split("</select>", 1)[0]
    return {value for value in re.findall(r'<option value="([^"]*)"', select) if value}


def test_a_scoped_member_chooses_among_their_own_teams_only(fleet, scoping, signed_in_as):
    client = in_team(signed_in_as, "vision", "operator")
    vision, speech = (str(fleet[team]["run"].team_id) for team in ("vision", "speech"))
    for url in ("/runs/", "/retention/", "/retention/tiering/", "/retention/policies/"):
        assert team_options(text(client, url)) == {vision}, url
    everyone = signed_in_as("operator", username="fleet-operator")
    for url in ("/runs/", "/retention/", "/retention/tiering/", "/retention/policies/"):
        assert team_options(text(everyone, url)) == {vision, speech}, url


def test_the_runs_list_refuses_another_teams_id_as_not_found(fleet, scoping, signed_in_as):
    client = in_team(signed_in_as, "vision")
    speech = fleet["speech"]["run"].team_id
    page = text(client, f"/runs/?team={speech}", status=404)
    assert f"Team {speech} not found" in page and THEIRS not in page
    assert "not found" in text(client, "/runs/?team=999999", status=404), "no team's id: the same answer"
    mine = text(client, f"/runs/?team={fleet['vision']['run'].team_id}")
    assert MINE in mine and "not found" not in mine
    answer = client.get(f"/api/v1/runs/?team={speech}")  # the API lists the same runs, and refuses the same
    assert answer.status_code == 404 and answer.json() == {"error": "not_found", "detail": f"team {speech} not found"}
    # Unscoped, the same id lists the other team's run.
    everyone = signed_in_as("viewer", username="fleet-viewer")
    assert THEIRS in text(everyone, f"/runs/?team={speech}")
    assert [r["name"] for r in everyone.get(f"/api/v1/runs/?team={speech}").json()["results"]] == [THEIRS]


def test_the_retention_forms_refuse_another_teams_id_and_change_nothing(fleet, scoping, signed_in_as):
    from audit.models import AuditEvent
    from retention.models import RetentionPolicy

    client = in_team(signed_in_as, "vision", "operator")
    speech = fleet["speech"]["run"].team_id
    policies, events = RetentionPolicy.objects.count(), AuditEvent.objects.count()
    for url in (f"/retention/?team={speech}", f"/retention/tiering/?team={speech}&to_class=GLACIER_IR"):
        page = text(client, url)
        assert "That team was not found" in page and THEIRS not in page, url
        assert MINE not in page, "refused whole: no simulation of the member's own runs either"
    response = client.post(
        "/retention/policies/",
        {"name": "theirs now", "team": speech, "keep_last": 1, "keep_every": 0, "reason": "mine"},
    )
    assert response.status_code == 200 and "That team was not found" in response.content.decode()
    for url in (f"/api/v1/retention/simulate/?team={speech}", f"/api/v1/retention/tiering/?team={speech}"):
        answer = client.get(url)
        assert answer.status_code == 404 and THEIRS not in answer.content.decode(), url
    created = client.post(
        "/api/v1/retention/policies/", {"name": "theirs", "team": speech}, content_type="application/json"
    )
    assert created.status_code == 404
    assert RetentionPolicy.objects.count() == policies and AuditEvent.objects.count() == events
    # Their own team is accepted.
    own = client.post(
        "/retention/policies/",
        {"name": "vision's", "team": fleet["vision"]["run"].team_id, "keep_last": 1, "keep_every": 0, "reason": "r"},
    )
    assert own.status_code == 302 and RetentionPolicy.objects.count() == policies + 1
