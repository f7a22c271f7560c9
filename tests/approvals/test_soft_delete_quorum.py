"""Shortening a location's recovery window is a change that can delete: a person's shortening waits for a
second person in the approvals inbox; lengthening it, and a command's change, apply at once (issue 15, item 4)."""

from __future__ import annotations

import pytest

from approvals import services as approvals
from approvals.choices import ChangeState
from approvals.models import ChangeRequest
from audit.models import AuditEvent
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.models import StorageLocation
from fleet.services import location_set_soft_delete
from tests.actions.conftest import as_ui, make_person
from tests.factories import StorageLocationFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def location(settings) -> StorageLocation:
    settings.SOFT_DELETE_DAYS = 7
    return StorageLocationFactory(bucket=True)


def test_a_persons_shortening_waits_for_a_second_person(location):
    adam, april = make_person("adam", "admin"), make_person("april", "approver")
    change = location_set_soft_delete(location=location, days=1, reason="scratch bucket", actor=as_ui(adam))
    assert isinstance(change, ChangeRequest) and change.state == ChangeState.AWAITING_APPROVAL
    location.refresh_from_db()
    assert location.trash_days == 7  # unchanged until approved
    with pytest.raises(PermissionRefused):
        approvals.approve_change(change=change, actor=as_ui(adam))  # the one who asked
    approvals.approve_change(change=change, actor=as_ui(april))
    location.refresh_from_db()
    assert location.trash_days == 1
    event = AuditEvent.objects.filter(action="location.soft_delete").latest("id")
    assert (event.after["requested_by"], event.after["approved_by"]) == ("adam", "april")
    assert (event.before["effective_days"], event.after["effective_days"]) == (7, 1)


def test_lengthening_and_a_commands_change_apply_at_once(location):
    from audit.actor import Actor

    adam = make_person("adam", "admin")
    done = location_set_soft_delete(location=location, days=30, reason="a month", actor=as_ui(adam))
    assert isinstance(done, StorageLocation) and done.trash_days == 30
    done = location_set_soft_delete(location=location, days=2, reason="ops", actor=Actor.command(label="tests"))
    assert isinstance(done, StorageLocation) and done.trash_days == 2


def test_a_request_made_stale_by_another_change_is_refused(location):
    adam, april = make_person("adam", "admin"), make_person("april", "approver")
    change = location_set_soft_delete(location=location, days=1, reason="scratch", actor=as_ui(adam))
    location_set_soft_delete(location=location, days=30, reason="longer", actor=as_ui(adam))
    with pytest.raises(DomainError, match="changed since this was asked for"):
        approvals.approve_change(change=change, actor=as_ui(april))
    location.refresh_from_db()
    assert location.trash_days == 30
