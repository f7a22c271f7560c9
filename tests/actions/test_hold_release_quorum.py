"""A governance hold's release asked for by an operator and approved by an approver in the approvals inbox
(issue 15, item 4: quorum for the changes that can delete)."""

from __future__ import annotations

import pytest

from actions import services
from actions.models import Hold
from approvals import services as approvals
from approvals.choices import ChangeState
from audit.models import AuditEvent
from ckptfleet.errors import DomainError, PermissionRefused
from tests.actions.conftest import as_ui, make_person

pytestmark = pytest.mark.django_db


def governance(fleet, olga) -> Hold:
    return services.hold(
        run=fleet.run, reason="internal review", case_ref="GOV-9", mode="governance", actor=as_ui(olga)
    )


def test_an_operator_asks_and_an_approver_releases_with_both_in_the_audit(fleet, olga, oscar, april):
    hold = governance(fleet, olga)
    change = services.request_release(hold=hold, reason="review closed", case_ref="GOV-9-C", actor=as_ui(oscar))
    hold.refresh_from_db()
    assert hold.active  # still in force until approved
    with pytest.raises(DomainError, match="already asked for by oscar"):
        services.request_release(hold=hold, reason="again", case_ref="GOV-9-D", actor=as_ui(oscar))
    with pytest.raises(PermissionRefused):
        approvals.approve_change(change=change, actor=as_ui(oscar))  # not an approver, and the one who asked

    approvals.approve_change(change=change, actor=as_ui(april))
    hold.refresh_from_db()
    assert not hold.active and hold.released_label == "april" and hold.release_case_ref == "GOV-9-C"
    change.refresh_from_db()
    assert change.state == ChangeState.APPLIED
    event = AuditEvent.objects.filter(action="hold.release").latest("id")
    assert (event.after["requested_by"], event.after["approved_by"]) == ("oscar", "april")


def test_the_approver_who_placed_the_hold_cannot_approve_its_release(fleet, oscar):
    ada = make_person("ada", "operator", "approver")
    hold = governance(fleet, ada)
    change = services.request_release(hold=hold, reason="done", case_ref="C", actor=as_ui(oscar))
    with pytest.raises(PermissionRefused, match="another person must release it"):
        approvals.approve_change(change=change, actor=as_ui(ada))
    hold.refresh_from_db()
    assert hold.active


def test_a_request_for_a_hold_released_since_is_refused_at_approval(fleet, olga, oscar, april):
    hold = governance(fleet, olga)
    change = services.request_release(hold=hold, reason="done", case_ref="C", actor=as_ui(oscar))
    services.release(hold=hold, reason="directly", case_ref="C2", actor=as_ui(april))
    with pytest.raises(DomainError, match="released since"):
        approvals.approve_change(change=change, actor=as_ui(make_person("otto", "approver")))


def test_only_governance_holds_are_asked_for(fleet, olga, oscar):
    legal = services.hold(run=fleet.run, reason="r", case_ref="L-1", actor=as_ui(olga))
    with pytest.raises(DomainError, match="only a governance hold"):
        services.request_release(hold=legal, reason="x", case_ref="y", actor=as_ui(oscar))


def test_the_page_offers_an_operator_to_ask(fleet, olga, oscar, client):
    hold = governance(fleet, olga)
    client.force_login(oscar)
    page = client.get(f"/runs/{fleet.run.pk}/")
    assert b"Ask an approver to release it" in page.content
    answer = client.post(
        f"/actions/holds/{hold.pk}/release/", {"reason": "review closed", "case_ref": "GOV-9-C"}, follow=True
    )
    assert b"asked for (request" in answer.content
    hold.refresh_from_db()
    assert hold.active
