"""Hold modes through every way in: the API (mode and retain_until in create and list, clear 4xx errors), the
pages (the form, the modes and dates in the hold list, release offered only to who may use it) and the command."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from actions import services
from actions.models import Hold, HoldMode
from audit.models import AuditEvent
from tests.actions.conftest import as_ui

pytestmark = pytest.mark.django_db

HOLDS = "/api/v1/actions/holds/"


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def post(client: Client, url: str, data: dict):
    return client.post(url, data, content_type="application/json")


def in_days(days: int) -> str:
    return (timezone.now() + timedelta(days=days)).date().isoformat()


def actions_written() -> int:
    return AuditEvent.objects.exclude(action="access.refused").count()


# --- the API -------------------------------------------------------------------------------------------


def test_the_api_places_and_lists_a_compliance_hold_and_refuses_its_release_with_a_clear_403(fleet, olga, oscar):
    olga_c, oscar_c = client_for(olga), client_for(oscar)
    day = in_days(45)
    made = post(
        olga_c,
        HOLDS,
        {"run": fleet.run.pk, "reason": "order", "case_ref": "SEC-1", "mode": "compliance", "retain_until": day},
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert (body["mode"], body["retain_until"][:10], body["releasable_after"][:10]) == ("compliance", day, day)
    listed = olga_c.get(f"{HOLDS}?mode=compliance").json()["results"]
    assert [(h["id"], h["mode"], h["retain_until"]) for h in listed] == [
        (body["id"], "compliance", body["retain_until"])
    ]
    assert olga_c.get(f"{HOLDS}?mode=legal").json()["results"] == []

    n = actions_written()
    answer = post(oscar_c, f"{HOLDS}{body['id']}/release/", {"reason": "please"})
    assert answer.status_code == 403
    assert answer.json()["error"] == "forbidden" and f"retained until {day}" in answer.json()["detail"]
    assert actions_written() == n and Hold.objects.get().active

    earlier = post(oscar_c, f"{HOLDS}{body['id']}/extend/", {"retain_until": in_days(10), "reason": "x"})
    assert earlier.status_code == 400 and "never shortened" in earlier.json()["detail"]
    later = post(oscar_c, f"{HOLDS}{body['id']}/extend/", {"retain_until": in_days(400), "reason": "appeal"})
    assert later.status_code == 200 and later.json()["retain_until"][:10] == in_days(400)
    event = AuditEvent.objects.order_by("-id").first()
    assert (event.action, event.source, event.before["retain_until"][:10]) == ("hold.extend", "api", day)


@pytest.mark.parametrize(
    ("data", "status", "text"),
    [
        ({"mode": "forever"}, 400, "mode must be one of legal, governance, compliance"),
        ({"mode": "compliance"}, 400, "required for a compliance hold"),
        ({"mode": "compliance", "retain_until": "2001-01-01"}, 400, "must be in the future"),
        ({"mode": "compliance", "retain_until": "next week"}, 400, "must be a date"),
        ({"mode": "compliance", "retain_until": "2999-12-31"}, 400, "within 3653 days"),
        ({"mode": "legal", "retain_until": "2030-01-01"}, 400, "only a compliance hold"),
        ({"mode": None}, 400, "invalid input"),
        ({"mode": "compliance", "retain_until": ["2030-01-01"]}, 400, "invalid input"),
    ],
)
def test_the_api_answers_a_bad_mode_or_date_with_a_clear_400_and_changes_nothing(fleet, olga, data, status, text):
    n = actions_written()
    answer = post(client_for(olga), HOLDS, {"run": fleet.run.pk, "reason": "r", "case_ref": "C", **data})
    assert answer.status_code == status and text in answer.json()["detail"], answer.json()
    assert actions_written() == n and not Hold.objects.exists()


def test_the_api_lets_only_another_approver_release_a_governance_hold_and_asks_for_its_case_reference(
    fleet, olga, oscar, april
):
    made = post(
        client_for(olga), HOLDS, {"run": fleet.run.pk, "reason": "review", "case_ref": "GOV-1", "mode": "governance"}
    ).json()
    url = f"{HOLDS}{made['id']}/release/"
    by_operator = post(client_for(oscar), url, {"reason": "done", "case_ref": "GOV-1-C"})
    assert by_operator.status_code == 403 and "approver role" in by_operator.json()["detail"]
    april_c = client_for(april)
    no_case = post(april_c, url, {"reason": "done"})
    assert no_case.status_code == 400 and "case reference" in no_case.json()["detail"]
    done = post(april_c, url, {"reason": "done", "case_ref": "GOV-1-C"})
    assert done.status_code == 200 and (done.json()["release_case_ref"], done.json()["active"]) == ("GOV-1-C", False)
    assert client_for(olga).get(f"{HOLDS}?mode=bogus").status_code == 400


# --- the pages -----------------------------------------------------------------------------------------


def test_the_hold_form_offers_the_modes_and_places_a_compliance_hold(fleet, olga):
    client = client_for(olga)
    ckpt = fleet.checkpoints[200]
    page = client.get(reverse("catalog:checkpoint-detail", args=[ckpt.pk])).content.decode()
    for text in ("Legal hold", "Governance hold", "Compliance hold", "nobody can release it or shorten the date"):
        assert text in page
    assert 'type="date" name="retain_until"' in page
    day = in_days(60)
    answer = client.post(
        reverse("actions:hold", args=[fleet.run.pk]),
        {"checkpoint": ckpt.pk, "mode": "compliance", "retain_until": day, "reason": "order", "case_ref": "SEC-9"},
        follow=True,
    )
    text = answer.content.decode()
    assert f"Compliance hold SEC-9 placed on {ckpt}" in text and f"Nobody can release it before {day} 00:00 UTC" in text
    made = Hold.objects.get()
    assert (made.mode, made.retain_until) == (HoldMode.COMPLIANCE, datetime.fromisoformat(day).replace(tzinfo=UTC))

    bad = client.post(
        reverse("actions:hold", args=[fleet.run.pk]),
        {"mode": "compliance", "retain_until": "2001-01-01", "reason": "order", "case_ref": "SEC-10"},
        follow=True,
    )
    assert "Not held: the retain-until date must be in the future" in bad.content.decode()
    assert Hold.objects.count() == 1


def test_the_hold_list_shows_modes_and_dates_and_offers_release_only_to_who_may_use_it(fleet, olga, oscar, april):
    ckpt = fleet.checkpoints[200]
    services.hold(run=fleet.run, checkpoint=ckpt, reason="r", case_ref="LEG-1", actor=as_ui(olga))
    gov = services.hold(
        run=fleet.run, checkpoint=ckpt, reason="r", case_ref="GOV-1", mode="governance", actor=as_ui(olga)
    )
    kept = services.hold(
        run=fleet.run,
        checkpoint=ckpt,
        reason="r",
        case_ref="SEC-1",
        mode="compliance",
        retain_until=in_days(30),
        actor=as_ui(olga),
    )
    url = reverse("catalog:checkpoint-detail", args=[ckpt.pk])
    release = lambda h: reverse("actions:release", args=[h.pk])  # noqa: E731

    as_oscar = client_for(oscar).get(url).content.decode()
    assert "Under holds (legal hold, governance hold, compliance hold)" in as_oscar
    assert f">{kept.retain_until:%Y-%m-%d %H:%M:%S} UTC</time>; cannot be released" in as_oscar
    assert release(kept) not in as_oscar
    # An operator may only ask for a governance hold's release; an approver approves it (approvals inbox).
    assert release(gov) in as_oscar and "Ask an approver to release it" in as_oscar
    assert reverse("actions:extend", args=[kept.pk]) in as_oscar  # an operator may extend it
    legal = Hold.objects.get(case_ref="LEG-1")
    assert release(legal) in as_oscar

    as_april = client_for(april).get(url).content.decode()
    assert release(gov) in as_april and release(legal) not in as_april and release(kept) not in as_april
    assert 'name="case_ref" required' in as_april

    as_olga = client_for(olga).get(url).content.decode()
    assert all(release(h) not in as_olga for h in (legal, gov, kept))

    # The run page's timeline names each hold with its mode and, for a compliance hold, its date.
    run_page = client_for(oscar).get(reverse("catalog:run-detail", args=[fleet.run.pk])).content.decode()
    assert f"Held (GOV-1, governance; LEG-1; SEC-1, compliance until {kept.retain_until:%Y-%m-%d})" in run_page

    refused = client_for(oscar).post(release(kept), {"reason": "please"}, follow=True).content.decode()
    assert "Not released: hold SEC-1 is a compliance hold retained until" in refused
    assert Hold.objects.get(pk=kept.pk).active


def test_the_extend_form_moves_the_date_later_and_says_so(fleet, olga, oscar):
    kept = services.hold(
        run=fleet.run, reason="r", case_ref="SEC-2", mode="compliance", retain_until=in_days(30), actor=as_ui(olga)
    )
    day = in_days(90)
    answer = client_for(oscar).post(
        reverse("actions:extend", args=[kept.pk]), {"retain_until": day, "reason": "appeal"}, follow=True
    )
    assert f"Hold SEC-2 is now retained until {day} 00:00 UTC" in answer.content.decode()
    shorter = client_for(oscar).post(
        reverse("actions:extend", args=[kept.pk]), {"retain_until": in_days(40), "reason": "x"}, follow=True
    )
    assert "Not extended" in shorter.content.decode() and "never shortened" in shorter.content.decode()
    assert Hold.objects.get(pk=kept.pk).retain_until.date().isoformat() == day


# --- the command -----------------------------------------------------------------------------------------


def test_the_command_places_extends_and_is_refused_the_release_of_a_compliance_hold(fleet, olga, oscar, capsys):
    day, later = in_days(20), in_days(200)
    run = str(fleet.run.pk)
    call_command(
        "fleet_action", "hold", "--as", "olga", "--run", run, "--mode", "compliance", "--retain-until", day,
        "--reason", "order", "--case", "SEC-3",
    )  # fmt: skip
    made = Hold.objects.get()
    assert f"compliance hold {made.pk} (SEC-3) placed" in capsys.readouterr().out
    with pytest.raises(CommandError, match="retained until"):
        call_command("fleet_action", "release", "--as", "oscar", "--hold", str(made.pk), "--reason", "x")
    call_command(
        "fleet_action", "extend", "--as", "oscar", "--hold", str(made.pk), "--retain-until", later, "--reason", "appeal"
    )
    assert f"retained until {later} 00:00 UTC" in capsys.readouterr().out
