"""The audit trail's models moved from catalog to the audit app with their tables: events written before the move
read back after it, and the hash chain still verifies (migrations run from the previous schema, with data)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from audit.actor import Actor
from audit.models import AuditEvent
from audit.services import GENESIS, UNKEYED, audit, audit_verify, event_fields, event_hash
from tests.conftest import let_the_test_runner_flush

BEFORE = [("catalog", "0016_copy_content_print"), ("contenttypes", "0002_remove_content_type_name")]


def latest() -> list[tuple[str, str]]:
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


@pytest.mark.django_db(transaction=True)
def test_events_written_before_the_move_read_back_after_it_and_the_chain_verifies():
    executor = MigrationExecutor(connection)
    executor.migrate([*BEFORE, ("audit", None)])  # the schema before the audit app existed
    old = executor.loader.project_state(BEFORE).apps
    assert not any(model._meta.app_label == "audit" for model in old.get_models())
    OldEvent, OldHead = old.get_model("catalog", "AuditEvent"), old.get_model("catalog", "AuditChainHead")
    event = OldEvent(
        at=timezone.now(),
        actor_kind="user",
        actor_label="ada",
        source="ui",
        action="checkpoint.hold",
        target_type="checkpoint",
        target_id=7,
        target_label="llm/run-1 step 100",
        reason="incident 42",
        before={"held": False},
        after={"held": True},
        prev_hash=GENESIS,
    )
    event.hash = event_hash(GENESIS, event_fields(event), UNKEYED)  # the chain was unkeyed then
    event.save()
    OldHead.objects.create(pk=1, last_hash=event.hash, count=1)
    ContentType = old.get_model("contenttypes", "ContentType")
    ContentType.objects.get_or_create(app_label="catalog", model="auditevent")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(latest())
    let_the_test_runner_flush()

    moved = AuditEvent.objects.get()
    assert (moved.pk, moved.action, moved.after, moved.hash) == (
        event.pk,
        "checkpoint.hold",
        {"held": True},
        event.hash,
    )
    assert AuditEvent._meta.db_table == "catalog_auditevent"
    from django.contrib.contenttypes.models import ContentType as CurrentType

    assert CurrentType.objects.filter(app_label="audit", model="auditevent").count() == 1
    assert not CurrentType.objects.filter(app_label="catalog", model="auditevent").exists()
    # The chain continues from the event written before the move, and verifies end to end.
    from django.db import transaction

    with transaction.atomic():
        audit(Actor.command(), "audit.checked", target_type="audit")
    checked, broken, why = audit_verify()
    assert (checked, broken, why) == (2, None, "")
    assert AuditEvent.objects.order_by("id").last().prev_hash == event.hash
