"""Teams and cost centers with history: the services and their audit, the roles on the page and the API, and spend
reports that bill each day to the cost center in force that day (past months keep the old one).

Usage: team vision (cost center CC-OLD, set before history was kept) and team llm (CC-A) each store 1 GiB on NVMe at
1.00 USD a day from 2026-10-01 to 2026-11-20. "Today" is 2026-11-20.
"""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError

from access.refusals import refusals_collected
from access.roles import Role
from audit.actor import Actor
from audit.choices import EventSource
from audit.models import AuditEvent
from catalog import teams
from catalog.models import Team, TeamCostCenter
from ckptfleet.errors import DomainError, PermissionRefused
from spend import report as spend
from spend.models import UsageDaily, UsageState
from spend.usage import usage_monthly_rebuild
from tests.factories import RunFactory, StorageLocationFactory, TeamFactory

pytestmark = pytest.mark.django_db

TODAY = date(2026, 11, 20)
OCTOBER, NOVEMBER = spend.Period.month(2026, 10), spend.Period.month(2026, 11)
GIB = 1024**3


@pytest.fixture
def fiona(django_user_model):
    from tests.conftest import give_roles

    user = django_user_model.objects.create_user(username="fiona", password="a-long-password-1")
    give_roles(user, Role.FINANCE)
    return user


@pytest.fixture
def vic(django_user_model):
    from tests.conftest import give_roles

    user = django_user_model.objects.create_user(username="vic", password="a-long-password-1")
    give_roles(user, Role.VIEWER)
    return user


def as_ui(user) -> Actor:
    return Actor.person(user, EventSource.UI)


def state() -> tuple:
    """Everything a refused change must leave alone."""
    return (
        list(Team.objects.order_by("pk").values_list("name", "cost_center")),
        TeamCostCenter.objects.count(),
        AuditEvent.objects.exclude(action="access.refused").count(),
    )


@pytest.fixture
def usage(db):
    """Both teams' daily usage, 1.00 USD a day each, and the monthly rollup rebuilt from it.

    Its world is at noon on TODAY, whatever the real date: the pages and the API read the clock for this month and
    for the days a cost center may take effect, and the usage stops at TODAY."""
    with time_machine.travel(datetime(TODAY.year, TODAY.month, TODAY.day, 12, tzinfo=UTC), tick=True):
        yield usage_of_two_teams()


def usage_of_two_teams() -> dict[str, Team]:
    nvme = StorageLocationFactory()
    made = {}
    for name, cc in (("vision", "CC-OLD"), ("llm", "CC-A")):
        team = TeamFactory(name=name, cost_center=cc)
        run = RunFactory(team=team, name=f"{name}-run")
        day, rows = date(2026, 10, 1), []
        while day <= TODAY:
            rows.append(
                UsageDaily(
                    day=day,
                    location=nvme,
                    team=team,
                    run=run,
                    run_status="active",
                    tier="nvme",
                    state=UsageState.COMPLETE,
                    bytes=GIB,
                    files=1,
                    cost_nanos=10**9,
                )
            )
            day += timedelta(days=1)
        UsageDaily.objects.bulk_create(rows)
        made[name] = team
    usage_monthly_rebuild()
    return made


def by_center(period: spend.Period) -> dict[str, str]:
    table = spend.by_cost_center(spend.basis_for(period, today=TODAY))
    return {r["cost_center"]: f"{r['spend']:.2f}" for r in table.rows if r["spend"]}


# --- the services -----------------------------------------------------------------------------------


def test_finance_creates_a_team_with_a_cost_center_and_it_is_audited(fiona):
    team = teams.team_create(actor=as_ui(fiona), name="  robotics ", cost_center="CC-9", reason="new lab")
    assert (team.name, team.cost_center) == ("robotics", "CC-9")
    [row] = TeamCostCenter.objects.filter(team=team)
    assert (row.effective_from, row.set_by, row.cost_center) == (teams.SINCE_EVER, fiona, "CC-9")
    event = AuditEvent.objects.get(action="team.create")
    assert (event.actor_label, event.target_id, event.reason) == ("fiona", team.pk, "new lab")
    assert event.after == {"name": "robotics", "cost_center": "CC-9"}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "a team needs a name"),
        ("   ", "a team needs a name"),
        ("x" * 101, "at most 100 characters (101 given)"),
        ("a/b", "may not contain '/'"),
        ("VISION", "a team named 'VISION' already exists"),
    ],
)
def test_a_bad_team_name_is_refused_and_nothing_changes(fiona, name, message):
    TeamFactory(name="vision")
    before = state()
    with pytest.raises(DomainError, match=message.replace("(", r"\(").replace(")", r"\)")):
        teams.team_create(actor=as_ui(fiona), name=name)
    assert state() == before


def test_a_rename_renames_the_scoping_group_too_and_is_audited(fiona):
    team = TeamFactory(name="vision")
    group = Group.objects.create(name="team:vision")
    teams.team_rename(actor=as_ui(fiona), team_id=team.pk, name="perception", reason="reorg")
    team.refresh_from_db()
    group.refresh_from_db()
    assert team.name == "perception" and group.name == "team:perception"
    event = AuditEvent.objects.get(action="team.rename")
    assert event.before == {"name": "vision"} and event.after["name"] == "perception"


def test_a_rename_onto_another_team_or_the_same_name_changes_nothing(fiona):
    team = TeamFactory(name="vision")
    TeamFactory(name="llm")
    before = state()
    with pytest.raises(DomainError, match="a team named 'LLM' already exists"):
        teams.team_rename(actor=as_ui(fiona), team_id=team.pk, name="LLM")
    with pytest.raises(DomainError, match="already named 'vision'"):
        teams.team_rename(actor=as_ui(fiona), team_id=team.pk, name="vision")
    assert state() == before


def test_a_cost_center_from_a_day_keeps_the_old_one_before_it(fiona):
    team = TeamFactory(name="vision", cost_center="CC-OLD")
    change = teams.team_set_cost_center(
        actor=as_ui(fiona),
        team_id=team.pk,
        cost_center="CC-NEW",
        effective_from=date(2026, 11, 1),
        reason="reorg",
        today=TODAY,
    )
    team.refresh_from_db()
    assert team.cost_center == "CC-NEW" and change.until is None
    rows = list(TeamCostCenter.objects.filter(team=team).values_list("effective_from", "cost_center"))
    assert rows == [(teams.SINCE_EVER, "CC-OLD"), (date(2026, 11, 1), "CC-NEW")]
    centers = teams.CostCenters.load()
    assert centers.on(team.pk, date(2026, 10, 31)) == "CC-OLD" and centers.on(team.pk, TODAY) == "CC-NEW"
    event = AuditEvent.objects.get(action="team.cost_center")
    assert event.before["cost_center"] == "CC-OLD" and event.after["effective_from"] == "2026-11-01"


def test_a_back_dated_change_between_two_applies_until_the_later_one(fiona):
    team = TeamFactory(name="vision", cost_center="CC-1")
    actor = as_ui(fiona)
    teams.team_set_cost_center(actor=actor, team_id=team.pk, cost_center="CC-3", effective_from=TODAY, today=TODAY)
    change = teams.team_set_cost_center(
        actor=actor, team_id=team.pk, cost_center="CC-2", effective_from=date(2026, 11, 5), today=TODAY
    )
    assert change.until == TODAY
    team.refresh_from_db()
    assert team.cost_center == "CC-3"  # today's stays
    centers = teams.CostCenters.load()
    assert [centers.on(team.pk, d) for d in (date(2026, 11, 4), date(2026, 11, 5), TODAY)] == ["CC-1", "CC-2", "CC-3"]


@pytest.mark.parametrize(
    ("value", "day", "message"),
    [
        ("CC-2", date(2026, 10, 31), "back-dated to 2026-11-01 at the earliest"),
        ("CC-2", date(2026, 11, 21), "cannot be set for a future day"),
        ("CC-2", "not a day", "is not a day"),
        ("C" * 101, TODAY, "at most 100 characters"),
        ("CC-1", TODAY, "already has CC-1 on 2026-11-20: nothing changed"),
    ],
)
def test_a_bad_cost_center_change_is_refused_and_nothing_changes(fiona, value, day, message):
    team = TeamFactory(name="vision", cost_center="CC-1")
    before = state()
    with pytest.raises(DomainError, match=message):
        teams.team_set_cost_center(
            actor=as_ui(fiona), team_id=team.pk, cost_center=value, effective_from=day, today=TODAY
        )
    assert state() == before


def test_a_viewer_may_not_change_a_team_and_the_refusal_is_audited(vic):
    team = TeamFactory(name="vision", cost_center="CC-1")
    before = state()
    with refusals_collected(source=EventSource.UI):  # as a request collects them
        with pytest.raises(PermissionRefused, match="needs the finance role"):
            teams.team_set_cost_center(actor=as_ui(vic), team_id=team.pk, cost_center="CC-2", today=TODAY)
        with pytest.raises(PermissionRefused):
            teams.team_create(actor=as_ui(vic), name="new")
        with pytest.raises(PermissionRefused):
            teams.team_rename(actor=as_ui(vic), team_id=team.pk, name="other")
    assert state() == before
    assert AuditEvent.objects.filter(action="access.refused", actor_label="vic").count() == 3


# --- history in the spend reports --------------------------------------------------------------------


def test_past_months_keep_the_old_cost_center_in_the_report(usage, fiona):
    teams.team_set_cost_center(
        actor=as_ui(fiona), team_id=usage["vision"].pk, cost_center="CC-NEW", effective_from=date(2026, 11, 1),
        today=TODAY,
    )  # fmt: skip
    assert by_center(OCTOBER) == {"CC-OLD": "31.00", "CC-A": "31.00"}
    assert by_center(NOVEMBER) == {"CC-NEW": "20.00", "CC-A": "20.00"}
    november = spend.by_cost_center(spend.basis_for(NOVEMBER, today=TODAY))
    old = next(r for r in november.rows if r["cost_center"] == "CC-OLD")
    assert f"{old['previous']:.2f}" == "31.00" and not old["spend"]  # its last month, under its own name


def test_a_change_in_the_middle_of_a_month_splits_that_month_day_by_day(usage, fiona):
    teams.team_set_cost_center(
        actor=as_ui(fiona), team_id=usage["llm"].pk, cost_center="CC-B", effective_from=date(2026, 11, 11),
        today=TODAY,
    )  # fmt: skip
    assert by_center(NOVEMBER) == {"CC-OLD": "20.00", "CC-A": "10.00", "CC-B": "10.00"}
    assert by_center(OCTOBER) == {"CC-OLD": "31.00", "CC-A": "31.00"}
    assert by_center(spend.Period.day(date(2026, 11, 10))) == {"CC-OLD": "1.00", "CC-A": "1.00"}
    assert by_center(spend.Period.day(date(2026, 11, 11))) == {"CC-OLD": "1.00", "CC-B": "1.00"}
    team_rows = {r["team"]: r["cost_center"] for r in spend.by_team(spend.basis_for(NOVEMBER, today=TODAY)).rows}
    assert team_rows == {"llm": "CC-A, then CC-B from 2026-11-11", "vision": "CC-OLD"}
    october = {r["team"]: r["cost_center"] for r in spend.by_team(spend.basis_for(OCTOBER, today=TODAY)).rows}
    assert october == {"llm": "CC-A", "vision": "CC-OLD"}


def test_the_csv_and_the_api_of_last_month_keep_the_old_cost_center(usage, fiona, signed_in_as):
    # The usage fixture's today (2026-11-20): the change is from the first of November; October is a closed month.
    this_month = spend.utc_today().replace(day=1)
    teams.team_set_cost_center(
        actor=as_ui(fiona), team_id=usage["vision"].pk, cost_center="CC-NEW", effective_from=this_month
    )
    client = signed_in_as(Role.FINANCE)
    response = client.get("/api/v1/spend/by-cost-center/?month=2026-10&format=csv")
    assert response.status_code == 200
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    centers = {r[0] for r in rows[1:]}
    assert "CC-OLD" in centers and "CC-NEW" not in centers
    by_team = client.get("/api/v1/spend/by-team/?month=2026-10").json()["rows"]
    assert {r["team"]: r["cost_center"] for r in by_team}["vision"] == "CC-OLD"
    page = client.get("/spend/?month=2026-10").content.decode()
    assert "CC-OLD" in page and "CC-NEW" not in page


# --- pages and API: the roles ------------------------------------------------------------------------


def test_the_teams_page_lists_teams_and_finance_edits_from_it(usage, signed_in_as):
    client = signed_in_as(Role.FINANCE)
    html = client.get("/spend/teams/").content.decode()
    assert "CC-OLD" in html and "Create a team" in html
    vision = usage["vision"]
    response = client.post(
        f"/spend/teams/{vision.pk}/",
        {"action": "cost_center", "cost_center": "CC-NEW", "effective_from": spend.utc_today().isoformat()},
    )
    assert response.status_code == 302
    vision.refresh_from_db()
    assert vision.cost_center == "CC-NEW"
    detail = client.get(f"/spend/teams/{vision.pk}/").content.decode()
    assert "CC-NEW" in detail and "the start" in detail and "Set cost center" in detail
    assert "/spend/teams/" in client.get("/spend/").content.decode()


def test_a_bad_change_on_the_page_says_why_and_changes_nothing(usage, signed_in_as):
    client = signed_in_as(Role.FINANCE)
    before = state()
    long_ago = date(2020, 1, 1).isoformat()
    html = client.post(
        f"/spend/teams/{usage['vision'].pk}/",
        {"action": "cost_center", "cost_center": "CC-NEW", "effective_from": long_ago},
    ).content.decode()
    assert "at the earliest: earlier months are closed" in html
    html = client.post("/spend/teams/", {"name": "vision"}).content.decode()
    assert "a team named &#x27;vision&#x27; already exists" in html
    assert state() == before


def test_a_viewer_reads_the_teams_page_but_cannot_change_anything(usage, signed_in_as):
    client = signed_in_as(Role.VIEWER)
    html = client.get("/spend/teams/").content.decode()
    assert "CC-OLD" in html and "Create a team" not in html and "needs the finance role" in html
    vision = usage["vision"]
    assert "Set cost center" not in client.get(f"/spend/teams/{vision.pk}/").content.decode()
    before = state()
    response = client.post(
        f"/spend/teams/{vision.pk}/", {"action": "cost_center", "cost_center": "X", "effective_from": "2026-11-20"}
    )
    assert response.status_code == 302
    assert client.post("/spend/teams/", {"name": "new"}).status_code == 302
    assert state() == before


def test_the_api_lists_creates_renames_and_sets_cost_centers_for_finance(usage, signed_in_as):
    client = signed_in_as(Role.FINANCE)
    listed = client.get("/api/v1/teams/").json()
    assert {t["name"]: t["cost_center"] for t in listed} == {"llm": "CC-A", "vision": "CC-OLD"}
    made = client.post("/api/v1/teams/", {"name": "robotics", "cost_center": "CC-9"}, content_type="application/json")
    assert made.status_code == 201 and made.json()["history"][0]["effective_from"] is None
    pk = made.json()["id"]
    renamed = client.patch(f"/api/v1/teams/{pk}/", {"name": "robots"}, content_type="application/json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "robots"
    today = spend.utc_today()
    changed = client.post(
        f"/api/v1/teams/{pk}/cost-center/",
        {"cost_center": "CC-10", "effective_from": today.isoformat(), "reason": "budget"},
        content_type="application/json",
    )
    assert changed.status_code == 201, changed.json()
    body = changed.json()
    assert body["team"]["cost_center"] == "CC-10" and body["entry"]["effective_from"] == today.isoformat()
    assert [h["cost_center"] for h in body["team"]["history"]] == ["CC-10", "CC-9"]
    assert AuditEvent.objects.filter(action__startswith="team.", source="api").count() == 3


def test_the_api_refuses_bad_input_with_one_error_shape_and_changes_nothing(usage, signed_in_as):
    client = signed_in_as(Role.FINANCE)
    before = state()
    future = (spend.utc_today() + timedelta(days=1)).isoformat()
    answer = client.post(
        f"/api/v1/teams/{usage['vision'].pk}/cost-center/",
        {"cost_center": "CC-X", "effective_from": future},
        content_type="application/json",
    )
    assert answer.status_code == 400 and "cannot be set for a future day" in answer.json()["detail"]
    answer = client.post("/api/v1/teams/", {"name": ""}, content_type="application/json")
    assert answer.status_code == 400 and answer.json() == {"error": "invalid", "detail": "a team needs a name"}
    answer = client.post("/api/v1/teams/", {"name": "Vision"}, content_type="application/json")
    assert answer.status_code == 409 and answer.json()["error"] == "exists"
    assert state() == before


def test_the_api_refuses_a_viewers_writes_with_403(usage, signed_in_as):
    client = signed_in_as(Role.VIEWER)
    assert client.get("/api/v1/teams/").status_code == 200
    before = state()
    pk = usage["vision"].pk
    assert client.post("/api/v1/teams/", {"name": "x"}, content_type="application/json").status_code == 403
    assert client.patch(f"/api/v1/teams/{pk}/", {"name": "x"}, content_type="application/json").status_code == 403
    answer = client.post(f"/api/v1/teams/{pk}/cost-center/", {"cost_center": "X"}, content_type="application/json")
    assert answer.status_code == 403 and "finance role" in answer.json()["detail"]
    assert state() == before


def test_the_schema_documents_every_operation_with_a_summary(signed_in):
    schema = signed_in.get("/api/v1/schema/?format=json").json()
    ops = {op["operationId"]: op for path in schema["paths"].values() for op in path.values() if "operationId" in op}
    for name in ("teams_list", "teams_create", "teams_retrieve", "teams_rename", "teams_set_cost_center"):
        assert ops[name]["summary"], name


# --- the command --------------------------------------------------------------------------------------


def test_the_command_sets_a_cost_center_and_says_what_it_did(fiona):
    TeamFactory(name="vision", cost_center="CC-1")
    out = io.StringIO()
    call_command("fleet_team", "cost-center", "--as", "fiona", "--team", "vision", "--cost-center", "CC-2", stdout=out)
    assert f"vision: CC-2 from {spend.utc_today():%Y-%m-%d}" in out.getvalue()
    assert AuditEvent.objects.get(action="team.cost_center").source == "command"
    listing = io.StringIO()
    call_command("fleet_team", "list", stdout=listing)
    assert "vision\tCC-2" in listing.getvalue() and "from the start: CC-1" in listing.getvalue()
    with pytest.raises(CommandError, match="no team named 'nobody'"):
        call_command("fleet_team", "cost-center", "--team", "nobody", "--cost-center", "X")
    with pytest.raises(CommandError, match="a team needs a name"):
        call_command("fleet_team", "create", "--name", " ")


def test_the_audit_trail_links_a_team_event_to_the_team(fiona, signed_in):
    team = teams.team_create(actor=as_ui(fiona), name="robotics", cost_center="CC-9")
    html = signed_in.get("/audit/?action=team.create").content.decode()
    assert f'href="/spend/teams/{team.pk}/"' in html
