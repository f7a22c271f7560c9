"""The retention lock: a cooling-off in which another approver may unlock, then only stricter, in the service and the
database (raw SQL against the triggers of retention migration 0003), on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from access.roles import Role
from approvals.models import ChangeRequest
from audit.models import AuditEvent
from ckptfleet.errors import DomainError, PermissionRefused
from retention import services
from retention.models import RetentionPolicy
from tests.helpers.approvals import approve_waiting, person
from tests.retention.fleet import Fleet

TABLE = "retention_retentionpolicy"


# The lock is kept by two clocks: the service reads the product's, the triggers the database's, and a test's travel
# (``--clock``) moves only the first. Here the product's clock is set to the database's, so the two agree at whatever
# instant the run is, and every time in these tests derives from that one clock.
pytestmark = pytest.mark.usefixtures("database_clock")


@pytest.fixture
def people(db, django_user_model):
    class People:
        olga = person(django_user_model, "olga", Role.OPERATOR)
        abe = person(django_user_model, "abe", Role.APPROVER)
        ann = person(django_user_model, "ann", Role.APPROVER)
        vic = person(django_user_model, "vic", Role.VIEWER)

    return People


@pytest.fixture
def policy(db, people) -> RetentionPolicy:
    fleet = Fleet()
    created = services.policy_create(
        actor=people.olga, name="llm", team=fleet.team, keep_last=5, keep_every=1000, enabled=True
    )
    approve_waiting(created.pk, by=people.abe)
    created.refresh_from_db()
    assert created.enabled
    return created


def end_cooling_off(policy: RetentionPolicy) -> None:
    """Move the lock's cooling-off into the past (allowed: during the cooling-off the database does not guard it)."""
    past = timezone.now() - timedelta(seconds=1)
    RetentionPolicy.objects.filter(pk=policy.pk).update(
        locked_at=past - timedelta(hours=72), lock_cooling_off_ends_at=past
    )
    policy.refresh_from_db()


def test_an_approver_locks_with_a_cooling_off_from_the_setting(policy, people, settings):
    settings.POLICY_LOCK_COOLING_OFF_HOURS = 72
    before = timezone.now()
    services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="retain 5 for the audit")
    policy.refresh_from_db()
    assert policy.lock_state == "cooling_off" and policy.locked_label == "abe"
    assert timedelta(hours=72) <= policy.lock_cooling_off_ends_at - before < timedelta(hours=72, minutes=1)
    [event] = AuditEvent.objects.filter(action="retention_policy.lock")
    assert event.actor_label == "abe" and event.reason == "retain 5 for the audit" and event.before["locked_at"] is None


def test_locking_needs_the_approver_role_and_a_reason(policy, people):
    with pytest.raises(PermissionRefused):
        services.policy_lock(policy_id=policy.pk, actor=people.olga, reason="x")
    with pytest.raises(DomainError, match="reason is required"):
        services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="  ")
    policy.refresh_from_db()
    assert not policy.locked


def test_in_its_cooling_off_another_approver_unlocks_it_but_not_the_one_who_locked(policy, people):
    services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="lock")
    with pytest.raises(PermissionRefused, match="another approver must unlock it"):
        services.policy_unlock(policy_id=policy.pk, actor=people.abe, reason="oops")
    services.policy_unlock(policy_id=policy.pk, actor=people.ann, reason="locked the wrong one")
    policy.refresh_from_db()
    assert policy.lock_state == "unlocked" and policy.locked_at is None
    [event] = AuditEvent.objects.filter(action="retention_policy.unlock")
    assert event.actor_label == "ann" and event.before["locked_at"] is not None


def test_past_its_cooling_off_nobody_unlocks_it(policy, people):
    services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="lock")
    end_cooling_off(policy)
    assert policy.lock_state == "binding"
    with pytest.raises(DomainError, match="locked for good"):
        services.policy_unlock(policy_id=policy.pk, actor=people.ann, reason="please")
    policy.refresh_from_db()
    assert policy.locked


@pytest.mark.parametrize(
    "change",
    [
        {"keep_last": 6},
        {"keep_every": 500},  # 500 divides 1,000: every multiple of 1,000 is still kept
        {"keep_every": 1},
        {"name": "llm (locked)"},
        {"enabled": False},
        {"keep_last": 9, "keep_every": 250},
    ],
)
def test_past_its_cooling_off_a_stricter_edit_applies_at_once_without_a_second_person(policy, people, change):
    services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="lock")
    end_cooling_off(policy)
    edit = services.policy_update(policy_id=policy.pk, actor=people.olga, reason="tighter", **change)
    assert edit.change_request is None
    policy.refresh_from_db()
    assert all(getattr(policy, k) == v for k, v in change.items())


@pytest.mark.parametrize(
    "change, words",
    [
        ({"keep_last": 4}, "keep the last 4 instead of 5"),
        ({"keep_every": 0}, "stop keeping every step that is a multiple of 1,000"),
        ({"keep_every": 2000}, "drops step 1,000"),
        ({"keep_every": 300}, "drops step 1,000"),
        ({"keep_milestones": False}, "stop keeping milestones"),
        ({"keep_critical": False}, "stop keeping critical"),
        ({"keep_stepless": False}, "stop keeping step-less"),
    ],
)
def test_past_its_cooling_off_a_loosening_is_refused_and_changes_nothing(policy, people, change, words):
    services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="lock")
    end_cooling_off(policy)
    before, requests = policy.snapshot(), ChangeRequest.objects.count()
    with pytest.raises(DomainError, match="can only be made stricter") as refused:
        services.policy_update(policy_id=policy.pk, actor=people.olga, **change)
    assert words in refused.value.message and refused.value.http_status == 409
    policy.refresh_from_db()
    assert policy.snapshot() == before and ChangeRequest.objects.count() == requests


def test_past_its_cooling_off_a_disabled_policy_is_not_enabled_again(policy, people):
    services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="lock")
    end_cooling_off(policy)
    services.policy_update(policy_id=policy.pk, actor=people.olga, enabled=False)
    with pytest.raises(DomainError, match="enable it"):
        services.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True)


def test_a_request_made_in_the_cooling_off_is_refused_once_the_lock_binds(policy, people):
    services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="lock")
    edit = services.policy_update(policy_id=policy.pk, actor=people.olga, keep_last=2, reason="save money")
    assert edit.change_request is not None
    end_cooling_off(policy)
    with pytest.raises(DomainError, match="can only be made stricter"):
        approve_waiting(policy.pk, by=people.ann)
    policy.refresh_from_db()
    assert policy.keep_last == 5
    assert ChangeRequest.objects.get(pk=edit.change_request.pk).awaiting


# --- the database's own guard: raw SQL, past the service -------------------------------------------


def raw(sql: str, *params) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


@pytest.fixture
def bound(policy, people) -> RetentionPolicy:
    services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="lock")
    end_cooling_off(policy)
    return policy


@pytest.mark.parametrize(
    "assignment",
    [
        "keep_last = 4",
        "keep_every = 0",
        "keep_every = 2000",
        "keep_every = 3",
        "keep_milestones = FALSE",
        "keep_critical = FALSE",
        "keep_stepless = FALSE",
        "locked_at = NULL, lock_cooling_off_ends_at = NULL, locked_by_id = NULL",
        "lock_cooling_off_ends_at = lock_cooling_off_ends_at + INTERVAL '1 day'",
        "team_id = NULL",
    ],
)
def test_the_database_refuses_an_update_that_loosens_a_bound_policy(bound, assignment):
    if connection.vendor == "sqlite":
        assignment = assignment.replace("FALSE", "0").replace(
            "lock_cooling_off_ends_at + INTERVAL '1 day'", "'2999-01-01 00:00:00'"
        )
    if assignment == "team_id = NULL":
        assignment = "team_id = NULL, run_id = (SELECT MIN(id) FROM catalog_run)"
    before = bound.snapshot()
    with pytest.raises(DatabaseError, match="can only be made stricter"):
        raw(f"UPDATE {TABLE} SET {assignment} WHERE id = %s", bound.pk)
    bound.refresh_from_db()
    assert bound.snapshot() == before


def test_the_database_refuses_to_delete_a_bound_policy(bound):
    with pytest.raises(DatabaseError, match="can only be made stricter"):
        raw(f"DELETE FROM {TABLE} WHERE id = %s", bound.pk)
    assert RetentionPolicy.objects.filter(pk=bound.pk).exists()


def test_the_database_refuses_to_enable_a_bound_disabled_policy(bound):
    raw(f"UPDATE {TABLE} SET enabled = %s WHERE id = %s", False, bound.pk)
    with pytest.raises(DatabaseError, match="can only be made stricter"):
        raw(f"UPDATE {TABLE} SET enabled = %s WHERE id = %s", True, bound.pk)


def test_the_database_lets_a_bound_policy_become_stricter_and_be_renamed(bound):
    raw(
        f"UPDATE {TABLE} SET keep_last = 7, keep_every = 250, name = 'llm strict', last_proposed_count = 3 "
        "WHERE id = %s",
        bound.pk,
    )
    bound.refresh_from_db()
    assert (bound.keep_last, bound.keep_every, bound.name) == (7, 250, "llm strict")


def test_the_database_leaves_a_policy_in_its_cooling_off_alone(policy, people):
    services.policy_lock(policy_id=policy.pk, actor=people.abe, reason="lock")
    raw(f"UPDATE {TABLE} SET keep_last = 1 WHERE id = %s", policy.pk)
    raw(f"UPDATE {TABLE} SET locked_at = NULL, lock_cooling_off_ends_at = NULL WHERE id = %s", policy.pk)
    policy.refresh_from_db()
    assert policy.keep_last == 1 and not policy.locked


def test_the_lock_triggers_exist(db):
    """SQLite drops a table's triggers when a migration copies the table: a later migration must recreate them."""
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [TABLE])
            expected = {"retention_policy_lock_no_delete", "retention_policy_lock_only_stricter"}
        else:
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal", [TABLE])
            expected = {"retention_policy_lock_rows", "retention_policy_lock_truncate"}
        assert expected <= {row[0] for row in cursor.fetchall()}


def test_the_policy_page_shows_the_lock(policy, people, signed_in_as):
    approver = signed_in_as(Role.APPROVER)
    page = approver.get(f"/retention/policies/{policy.pk}/").content.decode()
    assert "Not locked" in page and "Lock this policy" in page
    assert approver.post(f"/retention/policies/{policy.pk}/lock/", {"reason": "keep"}).status_code == 302
    policy.refresh_from_db()
    page = approver.get(f"/retention/policies/{policy.pk}/").content.decode()
    assert "Locked; can be unlocked until" in page and "Unlock this policy" in page
    end_cooling_off(policy)
    page = approver.get(f"/retention/policies/{policy.pk}/").content.decode()
    assert "Locked: can only be made stricter" in page and "Unlock this policy" not in page


def test_the_lock_api(policy, people, signed_in_as):
    one, two = signed_in_as(Role.APPROVER), signed_in_as(Role.APPROVER)
    url = f"/api/v1/retention/policies/{policy.pk}/"
    assert one.post(url + "lock/", {}, content_type="application/json").status_code == 400  # no reason
    locked = one.post(url + "lock/", {"reason": "keep"}, content_type="application/json")
    assert locked.status_code == 200 and locked.json()["lock_state"] == "cooling_off"
    assert one.post(url + "lock/", {"reason": "again"}, content_type="application/json").status_code == 409
    assert one.post(url + "unlock/", {"reason": "mine"}, content_type="application/json").status_code == 403
    end_cooling_off(policy)
    refused = two.post(url + "unlock/", {"reason": "please"}, content_type="application/json")
    assert refused.status_code == 409 and refused.json()["error"] == "locked"
    ops = signed_in_as(Role.OPERATOR)
    loosen = ops.patch(url, {"keep_last": 1}, content_type="application/json")
    assert loosen.status_code == 409 and "can only be made stricter" in loosen.json()["detail"]
    assert ops.post(url + "lock/", {"reason": "x"}, content_type="application/json").status_code == 403


def _pairs(count: int = 60) -> list[tuple[dict, dict]]:
    """Seeded random pairs of rule sets (and enabled), the same on every run."""
    import random

    rng = random.Random(15)

    def one() -> dict:
        return {
            "keep_last": rng.choice([1, 2, 5, 9]),
            "keep_every": rng.choice([0, 1, 2, 3, 250, 500, 1000, 3000]),
            "keep_milestones": rng.random() < 0.5,
            "keep_critical": rng.random() < 0.5,
            "keep_stepless": rng.random() < 0.5,
            "enabled": rng.random() < 0.5,
        }

    return [(one(), one()) for _ in range(count)]


def test_the_database_and_the_service_agree_on_what_loosens(people, db):
    """The rule is written twice, in Python (``retention.rules.loosenings``) and in the triggers' SQL: on 60 pairs
    of rule sets the trigger refuses exactly the updates the service refuses."""
    from retention.rules import KeepRules, loosenings

    team = Fleet().team
    outcomes = []
    for before, after in _pairs():
        with transaction.atomic():
            policy = RetentionPolicy.objects.create(
                name="pair",
                team=team,
                created_label="t",
                created_at=timezone.now(),
                updated_at=timezone.now(),
                **before,
            )
            past = timezone.now() - timedelta(seconds=1)
            RetentionPolicy.objects.filter(pk=policy.pk).update(
                locked_at=past - timedelta(hours=1), lock_cooling_off_ends_at=past
            )
            policy.refresh_from_db()
            rules = {k: v for k, v in before.items() if k != "enabled"}
            new_rules = {k: v for k, v in after.items() if k != "enabled"}
            expect = bool(loosenings(KeepRules(**rules), KeepRules(**new_rules))) or (
                after["enabled"] and not before["enabled"]
            )
            assert bool(services.lock_refusals(policy, {**policy.snapshot(), **after})) == expect, (before, after)
            sets = ", ".join(f"{k} = %s" for k in after)
            try:
                raw(f"UPDATE {TABLE} SET {sets} WHERE id = %s", *after.values(), policy.pk)
            except DatabaseError:
                refused = True
            else:
                refused = False
            assert refused == expect, (before, after)
            outcomes.append(refused)
            transaction.set_rollback(True)  # the bound policy is not deleted (the trigger refuses): roll it back
    assert 5 <= sum(outcomes) <= len(outcomes) - 5  # both answers, several times each
