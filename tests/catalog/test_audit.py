"""The audit trail is append-only and tamper-evident."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, transaction

from audit.models import AuditEvent
from audit.services import audit_record, audit_verify
from tests.conftest import is_postgres
from tests.helpers.audit import tamper


def record(action: str = "test.action", **kwargs) -> AuditEvent:
    with transaction.atomic():
        return audit_record(
            actor_kind="system",
            actor_label="tests",
            source="command",
            action=action,
            target_type="host",
            target_id=1,
            target_label="gpu-a01",
            **kwargs,
        )


def test_registering_a_host_writes_one_event(make_host):
    kit = make_host()
    events = list(AuditEvent.objects.filter(target_type="host", target_id=kit.host.pk).order_by("id"))
    assert [e.action for e in events] == ["host.register", "host.token_issue"]
    assert events[1].after["token_prefix"] in kit.token
    assert kit.token not in str(events[1].after)


def test_it_refuses_to_record_outside_a_transaction(transactional_db):
    with pytest.raises(RuntimeError):
        audit_record(actor_kind="system", actor_label="t", source="command", action="x", target_type="host")


def test_the_model_refuses_update_and_delete(db):
    event = record()
    event.reason = "rewritten"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=event.pk).update(reason="x")
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()


def test_verify_audit_passes_an_intact_chain(db, capsys):
    for i in range(5):
        record(f"a{i}", before={"n": i}, after={"n": i + 1})
    call_command("verify_audit")
    assert "5 events" in capsys.readouterr().out


def test_verify_audit_names_the_first_tampered_event(db):
    events = [record(f"a{i}") for i in range(4)]
    tamper("UPDATE catalog_auditevent SET reason = %s WHERE id = %s", ["edited", events[2].pk])
    with pytest.raises(CommandError, match=f"event {events[2].pk}"):
        call_command("verify_audit")


def test_verify_audit_notices_a_removed_event(db):
    events = [record(f"a{i}") for i in range(4)]
    tamper("DELETE FROM catalog_auditevent WHERE id = %s", [events[1].pk])
    with pytest.raises(CommandError, match=f"event {events[2].pk}"):
        call_command("verify_audit")


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE catalog_auditevent SET reason = 'x'",
        "DELETE FROM catalog_auditevent",
        "TRUNCATE catalog_auditevent",
    ],
)
def test_postgres_refuses_update_delete_and_truncate(db, statement):
    if not is_postgres():
        pytest.skip("the trigger exists on PostgreSQL; this runs in the PostgreSQL pass")
    record()
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE catalog_auditevent ENABLE TRIGGER catalog_auditevent_no_truncate")
    with pytest.raises(Exception, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)
    assert AuditEvent.objects.count() == 1


def _rehash(event: AuditEvent, **changes) -> str:
    """Edit an event the careful way: change it and recompute its own hash, as a forger who holds the key would."""
    from audit.services import event_fields, event_hash

    for name, value in changes.items():
        setattr(event, name, value)
    new_hash = event_hash(event.prev_hash, event_fields(event), event.alg)
    sets = ", ".join(f"{name} = %s" for name in changes)
    tamper(f"UPDATE catalog_auditevent SET {sets}, hash = %s WHERE id = %s", [*changes.values(), new_hash, event.pk])
    return new_hash


def test_verify_audit_finds_an_edit_whose_hash_was_recomputed_at_the_next_event(db):
    events = [record(f"a{i}", reason="routine") for i in range(4)]
    _rehash(events[1], reason="nothing to see")
    checked, broken, why = audit_verify()
    assert (checked, broken.pk) == (2, events[2].pk)  # the edited one checks out alone; its successor does not
    assert "prev_hash does not match" in why
    with pytest.raises(CommandError, match=f"event {events[2].pk}"):
        call_command("verify_audit")


def test_verify_audit_finds_a_rehashed_edit_of_the_newest_event_by_the_chain_head(db):
    events = [record(f"a{i}") for i in range(3)]
    _rehash(events[-1], actor_label="someone else")
    checked, broken, why = audit_verify()
    assert (checked, broken) == (3, None)
    assert "chain head does not match" in why
    with pytest.raises(CommandError, match="the end of the chain"):
        call_command("verify_audit")


def test_verify_audit_finds_an_event_inserted_into_the_middle(db):
    events = [record(f"a{i}") for i in range(3)]
    forged_hash = "f" * 64
    tamper(
        "UPDATE catalog_auditevent SET prev_hash = %s WHERE id = %s",
        [forged_hash, events[2].pk],
    )
    checked, broken, _ = audit_verify()
    assert broken.pk == events[2].pk
    assert checked == 2
