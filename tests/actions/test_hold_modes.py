"""Hold modes: legal, governance (the approver releases, with a case reference) and compliance (nobody releases
it before its retain-until date, superusers and raw SQL included), in the services and in the database."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from access.refusals import refusals_collected
from actions import services
from actions.models import DeletionJob, Hold, HoldMode
from audit.actor import Actor
from audit.choices import ActorKind, EventSource
from audit.models import AuditEvent
from ckptfleet.errors import DomainError, PermissionRefused
from tests.actions.conftest import as_ui, events
from tests.conftest import is_postgres

pytestmark = pytest.mark.django_db

POLICY = Actor(kind=ActorKind.WORKER, label="worker: retention", source=EventSource.TASK)


def snapshot():
    """Everything a hold action may change, to show that a refused one changed nothing."""
    return (
        AuditEvent.objects.exclude(action="access.refused").count(),
        list(Hold.objects.order_by("pk").values()),
        DeletionJob.objects.count(),
    )


def refused(call, *, match: str | None = None, kind=DomainError):
    before = snapshot()
    with pytest.raises(kind, match=match):
        call()
    assert snapshot() == before


def last_event() -> AuditEvent:
    return AuditEvent.objects.order_by("-id").first()


def soon(days: int = 30) -> datetime:
    return (timezone.now() + timedelta(days=days)).replace(microsecond=0)


@pytest.fixture
def root(db) -> User:
    """A superuser: holds every role, and still gets no way past a compliance hold."""
    return User.objects.create_superuser(username="root", password="a-long-password-1")


def compliance(fleet, actor_user, *, days: int = 30, case: str = "SEC-17a-4") -> Hold:
    return services.hold(
        run=fleet.run,
        checkpoint=fleet.checkpoints[200],
        reason="regulator's retention order",
        case_ref=case,
        mode=HoldMode.COMPLIANCE,
        retain_until=soon(days),
        actor=as_ui(actor_user),
    )


# --- legal: today's behaviour, the default -----------------------------------------------------------


def test_a_hold_is_a_legal_hold_unless_told_otherwise_and_its_event_says_so(fleet, olga, oscar):
    made = services.hold(run=fleet.run, reason="litigation", case_ref="LEG-1", actor=as_ui(olga))
    assert (made.mode, made.retain_until) == (HoldMode.LEGAL, None)
    assert last_event().after["mode"] == "legal" and last_event().after["retain_until"] is None
    services.release(hold=made, reason="case closed", actor=as_ui(oscar))
    assert last_event().before["mode"] == "legal"


# --- governance ---------------------------------------------------------------------------------------


def test_a_governance_hold_is_released_only_by_another_approver_with_a_reason_and_a_case_reference(
    fleet, olga, oscar, april
):
    made = services.hold(
        run=fleet.run, reason="internal review", case_ref="GOV-1", mode="governance", actor=as_ui(olga)
    )
    assert made.mode == HoldMode.GOVERNANCE and made.retain_until is None
    # An operator is not enough: releasing a governance hold needs the approver role (and is audited as refused).
    with refusals_collected(source="ui"):
        refused(
            lambda: services.release(hold=made, reason="done", case_ref="GOV-1-C", actor=as_ui(oscar)),
            match="approver role",
            kind=PermissionRefused,
        )
    assert AuditEvent.objects.filter(action="access.refused", actor_label="oscar").exists()
    refused(lambda: services.release(hold=made, reason="done", actor=as_ui(april)), match="case reference")
    refused(
        lambda: services.release(hold=made, reason="policy", case_ref="X", actor=POLICY),
        match="only a person with the approver role",
        kind=PermissionRefused,
    )
    refused(lambda: services.release(hold=made, reason="", case_ref="GOV-1-C", actor=as_ui(april)), match="reason")

    n = events()
    services.release(hold=made, reason="review finished", case_ref="GOV-1-CLOSE", actor=as_ui(april))
    assert events() == n + 1
    event = last_event()
    assert (event.action, event.actor_label, event.before["mode"]) == ("hold.release", "april", "governance")
    assert event.after["release_case_ref"] == "GOV-1-CLOSE"
    made.refresh_from_db()
    assert (made.released_label, made.release_case_ref) == ("april", "GOV-1-CLOSE")


def test_an_approver_who_placed_a_governance_hold_cannot_release_it(fleet, adam, april):
    made = services.hold(run=fleet.run, reason="review", case_ref="GOV-2", mode="governance", actor=as_ui(adam))
    refused(
        lambda: services.release(hold=made, reason="mine", case_ref="X", actor=as_ui(adam)),
        match="another person",
        kind=PermissionRefused,
    )
    services.release(hold=made, reason="not mine", case_ref="X", actor=as_ui(april))


def test_a_person_may_release_exactly_the_holds_the_page_offers(fleet, olga, oscar, april):
    legal = services.hold(run=fleet.run, reason="r", case_ref="L", actor=as_ui(olga))
    governance = services.hold(run=fleet.run, reason="r", case_ref="G", mode="governance", actor=as_ui(olga))
    kept = compliance(fleet, olga)
    assert [services.may_release(oscar, h) for h in (legal, governance, kept)] == [True, False, False]
    assert [services.may_release(april, h) for h in (legal, governance, kept)] == [False, True, False]
    assert [services.may_release(olga, h) for h in (legal, governance, kept)] == [False, False, False]


# --- compliance: placing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "retain_until", "match"),
    [
        ("compliance", None, "required for a compliance hold"),
        ("compliance", "", "required for a compliance hold"),
        ("compliance", "yesterday", "must be a date"),
        ("compliance", "2026-02-30", "must be a date"),
        ("compliance", date(2020, 1, 1), "must be in the future"),
        ("compliance", "2999-01-01", "within 3653 days"),
        ("compliance", datetime(2030, 1, 1), "time zone"),
        ("legal", "2030-01-01", "only a compliance hold"),
        ("governance", date(2030, 1, 1), "only a compliance hold"),
        ("permanent", None, "mode must be one of legal, governance, compliance"),
        (7, None, "mode must be one of"),
    ],
)
def test_a_hold_with_a_wrong_mode_or_date_is_refused_and_changes_nothing(fleet, olga, mode, retain_until, match):
    refused(
        lambda: services.hold(
            run=fleet.run, reason="r", case_ref="C", mode=mode, retain_until=retain_until, actor=as_ui(olga)
        ),
        match=match,
    )


def test_a_compliance_hold_takes_a_date_as_the_start_of_that_day_utc_and_audits_it(fleet, olga):
    day = (timezone.now() + timedelta(days=400)).date()
    made = services.hold(
        run=fleet.run, reason="r", case_ref="C-1", mode="compliance", retain_until=day.isoformat(), actor=as_ui(olga)
    )
    assert made.retain_until == datetime(day.year, day.month, day.day, tzinfo=UTC)
    event = last_event()
    assert (event.action, event.after["mode"], event.after["retain_until"]) == (
        "hold.place",
        "compliance",
        made.retain_until.isoformat(),
    )


# --- compliance: nobody releases it early ----------------------------------------------------------------


def test_nobody_releases_a_compliance_hold_before_its_date_superusers_and_workers_included(
    fleet, olga, oscar, adam, april, root
):
    made = compliance(fleet, olga)
    with refusals_collected(source="ui"):
        for person in (oscar, adam, root):
            refused(
                lambda person=person: services.release(hold=made, reason="please", actor=as_ui(person)),
                match="retained until .* nobody can release it before then, admins included",
                kind=PermissionRefused,
            )
    refused(lambda: services.release(hold=made, reason="policy", actor=POLICY), match="retained until")
    # Each refusal of a person is itself audited.
    refusals = AuditEvent.objects.filter(action="access.refused")
    assert set(refusals.values_list("actor_label", flat=True)) == {"oscar", "adam", "root"}
    made.refresh_from_db()
    assert made.active
    # And the checkpoint it covers is never deleted, by anyone.
    with pytest.raises(DomainError, match="compliance hold"):
        services.schedule_deletion(checkpoint=fleet.checkpoints[200], reason="x", actor=as_ui(root))
    assert not DeletionJob.objects.exists()


def placed_days_ago(fleet, person, *, days: int, retained: int, case: str) -> Hold:
    """A compliance hold placed ``days`` ago for ``retained`` days (the service's clock set back; the database's
    trigger reads its own clock, which is now)."""
    now = timezone.now()
    with time_machine.travel(now - timedelta(days=days), tick=False):
        return services.hold(
            run=fleet.run,
            reason="short order",
            case_ref=case,
            mode="compliance",
            retain_until=now - timedelta(days=days) + timedelta(days=retained),
            actor=as_ui(person),
        )


def test_a_compliance_hold_is_released_by_another_person_once_its_date_has_passed(database_clock, fleet, olga, oscar):
    now = timezone.now()
    made = placed_days_ago(fleet, olga, days=2, retained=1, case="C-2")
    with time_machine.travel(now - timedelta(days=1, hours=1), tick=False):
        refused(lambda: services.release(hold=made, reason="early", actor=as_ui(oscar)), match="retained until")
    refused(
        lambda: services.release(hold=made, reason="mine", actor=as_ui(olga)),
        match="another person",
        kind=PermissionRefused,
    )
    services.release(hold=made, reason="order expired", actor=as_ui(oscar))
    made.refresh_from_db()
    assert not made.active and last_event().before["retain_until"] == made.retain_until.isoformat()


# --- compliance: extended, never shortened -----------------------------------------------------------------


def test_a_compliance_hold_is_extended_as_its_own_audited_action_and_never_shortened(fleet, olga, oscar, vic):
    made = compliance(fleet, olga, days=30)
    first = made.retain_until
    refused(
        lambda: services.extend_hold(hold=made, retain_until=first - timedelta(days=1), reason="r", actor=as_ui(oscar)),
        match="never shortened",
    )
    refused(lambda: services.extend_hold(hold=made, retain_until=first, reason="r", actor=as_ui(oscar)), match="later")
    refused(
        lambda: services.extend_hold(hold=made, retain_until=soon(60), reason="", actor=as_ui(oscar)), match="reason"
    )
    refused(
        lambda: services.extend_hold(hold=made, retain_until=soon(60), reason="r", actor=as_ui(vic)),
        match="operator role",
        kind=PermissionRefused,
    )
    n = events()
    later = soon(90)
    services.extend_hold(hold=made, retain_until=later, reason="appeal filed", actor=as_ui(olga))
    assert events() == n + 1
    event = last_event()
    assert (event.action, event.reason, event.case_ref) == ("hold.extend", "appeal filed", made.case_ref)
    assert event.before == {"hold": made.pk, "mode": "compliance", "retain_until": first.isoformat()}
    made.refresh_from_db()
    assert made.retain_until == later and event.after["retain_until"] == made.retain_until.isoformat()


def test_only_a_compliance_hold_has_a_date_to_extend(fleet, olga, oscar):
    legal = services.hold(run=fleet.run, reason="r", case_ref="L", actor=as_ui(olga))
    refused(
        lambda: services.extend_hold(hold=legal, retain_until=soon(), reason="r", actor=as_ui(oscar)),
        match="only a compliance hold",
    )


# --- the database keeps the compliance rules itself ----------------------------------------------------------


def refused_by_database(statement) -> None:
    """Run ``statement`` in a savepoint; the database must refuse it (a trigger raising), changing nothing."""
    before = list(Hold.objects.order_by("pk").values())
    with pytest.raises(DatabaseError, match=r"compliance hold|TRUNCATE refused"), transaction.atomic():
        statement()
    assert list(Hold.objects.order_by("pk").values()) == before


def sql(text: str, params=()) -> None:
    with connection.cursor() as cursor:
        cursor.execute(text, list(params))


def test_the_database_refuses_to_release_shorten_change_or_delete_a_compliance_hold(database_clock, fleet, olga):
    made = compliance(fleet, olga)
    held = Hold.objects.filter(pk=made.pk)
    now = timezone.now()
    # The ORM (what the admin, a shell or a future bug would use) ...
    refused_by_database(lambda: held.update(released_at=now, released_label="root", release_reason="bypass"))
    refused_by_database(lambda: held.update(retain_until=made.retain_until - timedelta(seconds=1)))
    refused_by_database(lambda: held.update(mode=HoldMode.LEGAL, retain_until=None))
    refused_by_database(lambda: held.update(mode=HoldMode.GOVERNANCE))
    refused_by_database(lambda: held.update(checkpoint=fleet.checkpoints[100]))
    refused_by_database(lambda: held.delete())
    refused_by_database(lambda: Hold.objects.get(pk=made.pk).delete())
    # ... and raw SQL, as a superuser of the application would type it.
    refused_by_database(
        lambda: sql("UPDATE actions_hold SET released_at = %s, released_label = 'root' WHERE id = %s", [now, made.pk])
    )
    refused_by_database(lambda: sql("UPDATE actions_hold SET retain_until = %s WHERE id = %s", [now, made.pk]))
    refused_by_database(lambda: sql("DELETE FROM actions_hold"))
    if is_postgres():

        def truncate():
            sql("SET CONSTRAINTS ALL IMMEDIATE")  # ALTER TABLE waits for no deferred foreign-key checks
            sql("ALTER TABLE actions_hold ENABLE TRIGGER actions_hold_no_truncate")  # off only for the test flush
            sql("TRUNCATE actions_hold")

        refused_by_database(truncate)

    # What the guard allows: a later date, the mirror's bookkeeping, and everything about other holds.
    later = made.retain_until + timedelta(days=1)
    assert held.update(retain_until=later, mirror_detail="checked") == 1
    legal = services.hold(run=fleet.run, reason="r", case_ref="L-9", actor=as_ui(olga))
    Hold.objects.filter(pk=legal.pk).delete()
    assert list(Hold.objects.values_list("pk", flat=True)) == [made.pk]


def test_the_database_lets_a_compliance_hold_go_once_its_date_has_passed(database_clock, fleet, olga):
    made = placed_days_ago(fleet, olga, days=2, retained=1, case="C-3")
    assert Hold.objects.filter(pk=made.pk).update(released_at=timezone.now(), released_label="oscar") == 1
    # Released or not, it stays history: never deleted.
    refused_by_database(lambda: Hold.objects.filter(pk=made.pk).delete())


def test_the_admin_of_holds_is_read_only_for_a_superuser(fleet, olga, root, client):
    made = compliance(fleet, olga)
    client.force_login(root)
    page = client.get(f"/admin/actions/hold/{made.pk}/change/")
    assert page.status_code == 200 and b"compliance" in page.content.lower()
    assert b'name="_save"' not in page.content
    assert client.post(f"/admin/actions/hold/{made.pk}/delete/", {"post": "yes"}).status_code == 403
    assert client.post(f"/admin/actions/hold/{made.pk}/change/", {"mode": "legal"}).status_code == 403
    assert Hold.objects.get(pk=made.pk).active


@pytest.mark.parametrize("mode", [HoldMode.LEGAL, HoldMode.GOVERNANCE, HoldMode.COMPLIANCE])
def test_a_checkpoint_under_a_hold_of_any_mode_is_never_scheduled_for_deletion(fleet, olga, root, mode):
    until = soon() if mode == HoldMode.COMPLIANCE else None
    services.hold(run=fleet.run, reason="r", case_ref="ANY-1", mode=mode, retain_until=until, actor=as_ui(olga))
    ckpt = fleet.checkpoints[100]
    preview = services.preview(checkpoint=ckpt)
    assert not preview.allowed and preview.promise == 1 and f"under a {mode} hold" in preview.refusal
    refused(lambda: services.schedule_deletion(checkpoint=ckpt, reason="x", actor=as_ui(root)), match=f"{mode} hold")
