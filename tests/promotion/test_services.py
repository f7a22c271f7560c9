"""Promotion against moto's S3 server: restores tracked to the end, copies (multipart too), and the promises."""

from __future__ import annotations

import os

import pytest
from django.utils import timezone

from access.refusals import refusals_collected
from actions.models import Hold
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.choices import CopyState
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile
from ckptfleet.errors import DomainError, NotAuthenticated, PermissionRefused
from promotion import runner
from promotion.choices import ItemState, JobState, Method
from promotion.models import PromotionItem, PromotionJob
from promotion.services import cancel, promote, promotion_plan
from tests.promotion.conftest import WHEN, events

pytestmark = pytest.mark.services

MiB = 1024 * 1024


def hold(checkpoint, label="hana"):
    return Hold.objects.create(
        run=checkpoint.run,
        checkpoint=checkpoint,
        reason="litigation",
        case_ref="CASE-7",
        placed_label=label,
        placed_at=timezone.now(),
    )


def start(kit, capture, **kwargs):
    kwargs.setdefault("actor", kit.actor)
    kwargs.setdefault("reason", "incident 42: restart from it")
    with capture(execute=True):
        job = promote(**kwargs)
    job.refresh_from_db()
    return job


def test_a_glacier_copy_is_restored_tracked_until_available_and_copied_to_another_bucket(
    kit, django_capture_on_commit_callbacks
):
    checkpoint, _copy = kit.checkpoint(100, {"__0_0.distcp": (b"a" * 3000, "GLACIER"), "x.json": (b"{}", "GLACIER")})
    target = kit.bucket()
    kit.restores_take(4)

    job = start(
        kit,
        django_capture_on_commit_callbacks,
        checkpoint=checkpoint,
        target_location=target.location,
        target_storage_class="STANDARD",
    )

    assert (job.method, job.state) == (Method.RESTORE, JobState.RESTORING)
    head = kit.head(kit.source_name, "llm/llama/step-100/__0_0.distcp")
    assert head["Restore"] == 'ongoing-request="true"'
    polls = 0
    while job.state == JobState.RESTORING:
        polls += 1
        assert polls < 20, "the restore never finished"
        runner.poll(job.pk)
        job.refresh_from_db()
    assert polls >= 2  # it waited while the store said the restore was ongoing
    assert job.state == JobState.COMPLETED, job.error
    assert (job.bytes_done, job.bytes_total, job.items_done) == (3002, 3002, 2)
    assert kit.body(target.bucket_name, "llm/llama/step-100/__0_0.distcp") == b"a" * 3000
    assert kit.head(target.bucket_name, "llm/llama/step-100/x.json").get("StorageClass", "STANDARD") == "STANDARD"
    # The source is untouched: still archived, only restored for a while.
    assert kit.head(kit.source_name, "llm/llama/step-100/x.json")["StorageClass"] == "GLACIER"
    assert len(events("promotion.request")) == 1
    assert len(events("promotion.restore")) == 1
    assert len(events("promotion.complete")) == 1
    # A second delivery of the finished job records nothing more.
    runner.poll(job.pk)
    runner.copy(job.pk, claim="again")
    assert len(events("promotion.complete")) == 1


def test_a_restore_in_place_makes_the_archived_objects_readable_without_moving_them(
    kit, django_capture_on_commit_callbacks
):
    _checkpoint, copy = kit.checkpoint(110, {"m.pt": (b"m" * 500, "DEEP_ARCHIVE"), "x.json": (b"{}", "STANDARD")})

    job = start(kit, django_capture_on_commit_callbacks, copy=copy, target_location=kit.source.location, restore_days=3)

    assert job.state == JobState.COMPLETED, job.error
    assert (job.target_storage_class, job.in_place, job.bytes_done, job.items_done) == ("", True, 502, 2)
    head = kit.head(kit.source_name, "llm/llama/step-110/m.pt")
    assert head["StorageClass"] == "DEEP_ARCHIVE"
    assert head["Restore"].startswith('ongoing-request="false"')
    assert kit.body(kit.source_name, "llm/llama/step-110/m.pt") == b"m" * 500


def test_a_large_object_is_copied_in_parts_and_a_small_one_whole(kit, django_capture_on_commit_callbacks, settings):
    settings.PROMOTION_MULTIPART_THRESHOLD = 6 * MiB
    settings.PROMOTION_MULTIPART_PART_SIZE = 5 * MiB
    big = os.urandom(11 * MiB)
    _checkpoint, copy = kit.checkpoint(120, {"big.distcp": (big, "STANDARD_IA"), "small": (b"s" * 10, "STANDARD_IA")})
    target = kit.bucket()

    job = start(
        kit,
        django_capture_on_commit_callbacks,
        copy=copy,
        target_location=target.location,
        target_storage_class="STANDARD",
    )

    assert (job.method, job.state) == (Method.COPY, JobState.COMPLETED), job.error
    assert job.bytes_done == job.bytes_total == 11 * MiB + 10
    head = kit.head(target.bucket_name, "llm/llama/step-120/big.distcp")
    assert head["ETag"].strip('"').endswith("-3")  # three parts: 5 + 5 + 1 MiB
    assert head["Metadata"]["ckptfleet-source-etag"] == copy.files.get(path__endswith="big.distcp").etag
    assert kit.body(target.bucket_name, "llm/llama/step-120/big.distcp") == big
    details = dict(PromotionItem.objects.filter(job=job).values_list("path", "detail"))
    assert details == {"llm/llama/step-120/big.distcp": "multipart copy", "llm/llama/step-120/small": "copied"}
    # A re-run after a crash finds both objects there and identical: nothing is copied twice, nothing recorded twice.
    assert runner.copy(job.pk, claim="late") == "skipped"
    assert len(events("promotion.complete")) == 1


def test_a_copy_in_place_moves_the_objects_to_a_hotter_class(kit, django_capture_on_commit_callbacks):
    _checkpoint, copy = kit.checkpoint(130, {"a": (b"a" * 100, "STANDARD_IA")})
    ShardFile.objects.filter(copy=copy).update(mtime=timezone.now())
    plan = promotion_plan(copy=copy, target_location=kit.source.location, target_storage_class="STANDARD")
    assert any("younger than its 30-day minimum storage duration" in note for note in plan.notes), plan.notes

    job = start(
        kit,
        django_capture_on_commit_callbacks,
        copy=copy,
        target_location=kit.source.location,
        target_storage_class="STANDARD",
    )

    assert job.state == JobState.COMPLETED, job.error
    assert kit.head(kit.source_name, "llm/llama/step-130/a").get("StorageClass", "STANDARD") == "STANDARD"

    assert kit.body(kit.source_name, "llm/llama/step-130/a") == b"a" * 100


def test_a_resumed_job_keeps_what_an_earlier_worker_copied_and_copies_the_rest(kit, django_capture_on_commit_callbacks):
    _checkpoint, copy = kit.checkpoint(140, {"a": (b"a" * 10, "STANDARD"), "b": (b"b" * 20, "STANDARD")})
    target = kit.bucket()
    with django_capture_on_commit_callbacks(execute=False):  # the worker never started
        job = promote(copy=copy, target_location=target.location, actor=kit.actor, reason="resume test")
    # A worker copied "a" and died before recording it.
    kit.s3.client.copy_object(
        Bucket=target.bucket_name,
        Key="llm/llama/step-140/a",
        CopySource={"Bucket": kit.source_name, "Key": "llm/llama/step-140/a"},
    )

    assert runner.start(job.pk) == JobState.COMPLETED

    job.refresh_from_db()
    assert (job.items_done, job.bytes_done) == (2, 30)
    assert PromotionItem.objects.get(job=job, path__endswith="/a").detail == "already at the target, identical"
    assert kit.body(target.bucket_name, "llm/llama/step-140/b") == b"b" * 20


# --- the promises -----------------------------------------------------------------------------------


def test_an_object_of_a_held_checkpoint_at_the_target_is_never_overwritten(kit, django_capture_on_commit_callbacks):
    _checkpoint, copy = kit.checkpoint(150, {"a": (b"new" * 10, "STANDARD_IA")})
    target = kit.bucket()
    with django_capture_on_commit_callbacks(execute=False):
        job = promote(copy=copy, target_location=target.location, actor=kit.actor, reason="overwrite test")
    # Meanwhile a held checkpoint's object lands at the same key of the target.
    other_run = Run.objects.create(team=kit.team, name="other")
    held = Checkpoint.objects.create(run=other_run, step=150)
    held_copy = CheckpointCopy.objects.create(
        checkpoint=held,
        location=target.location,
        path="llm/llama/step-150",
        format="pytorch_dcp",
        state=CopyState.COMPLETE,
    )
    kit.s3.client.put_object(Bucket=target.bucket_name, Key="llm/llama/step-150/a", Body=b"evidence")
    ShardFile.objects.create(
        location=target.location,
        path="llm/llama/step-150/a",
        size=8,
        mtime=WHEN,
        copy=held_copy,
        first_seen_at=WHEN,
        changed_at=WHEN,
    )
    hold(held)

    assert runner.start(job.pk) == JobState.FAILED

    assert kit.body(target.bucket_name, "llm/llama/step-150/a") == b"evidence"
    item = PromotionItem.objects.get(job=job)
    assert item.state == ItemState.BLOCKED
    assert "on hold" in item.detail and "never overwritten" in item.detail
    job.refresh_from_db()
    assert job.items_blocked == 1 and job.bytes_done == 0
    assert len(events("promotion.fail")) == 1


def test_a_promotion_onto_a_held_checkpoints_copy_is_refused_before_anything_happens(kit):
    _checkpoint, copy = kit.checkpoint(160, {"a": (b"a", "STANDARD")})
    target = kit.bucket()
    other = Checkpoint.objects.create(run=Run.objects.create(team=kit.team, name="other"), step=160)
    CheckpointCopy.objects.create(
        checkpoint=other, location=target.location, path=copy.path, format="pytorch_dcp", state=CopyState.COMPLETE
    )
    hold(other)

    with pytest.raises(DomainError) as refused:
        promote(copy=copy, target_location=target.location, actor=kit.actor, reason="x")

    assert refused.value.code == "held"
    assert not PromotionJob.objects.exists()
    assert not events("promotion.request")


def test_a_held_checkpoint_is_not_rewritten_in_place_but_may_be_restored_or_copied(
    kit, django_capture_on_commit_callbacks
):
    checkpoint, copy = kit.checkpoint(170, {"a": (b"a" * 5, "GLACIER")})
    hold(checkpoint)

    with pytest.raises(DomainError) as refused:
        promote(
            copy=copy, target_location=kit.source.location, target_storage_class="STANDARD", actor=kit.actor, reason="x"
        )
    assert refused.value.code == "held"
    assert kit.head(kit.source_name, "llm/llama/step-170/a")["StorageClass"] == "GLACIER"

    job = start(kit, django_capture_on_commit_callbacks, copy=copy, target_location=kit.source.location)
    assert job.state == JobState.COMPLETED  # a temporary restore overwrites nothing
    assert kit.head(kit.source_name, "llm/llama/step-170/a")["StorageClass"] == "GLACIER"


def test_a_hold_placed_mid_job_stops_an_in_place_rewrite(kit, django_capture_on_commit_callbacks):
    checkpoint, copy = kit.checkpoint(175, {"a": (b"a" * 5, "STANDARD_IA"), "b": (b"b", "STANDARD_IA")})
    with django_capture_on_commit_callbacks(execute=False):
        job = promote(
            copy=copy, target_location=kit.source.location, target_storage_class="STANDARD", actor=kit.actor, reason="x"
        )
    hold(checkpoint)

    assert runner.start(job.pk) == JobState.FAILED

    for name in ("a", "b"):
        assert kit.head(kit.source_name, f"llm/llama/step-175/{name}")["StorageClass"] == "STANDARD_IA"
    assert set(PromotionItem.objects.filter(job=job).values_list("state", flat=True)) == {ItemState.BLOCKED}


@pytest.mark.parametrize("target_class", ["STANDARD_IA", "GLACIER", "DEEP_ARCHIVE"])
def test_nothing_is_moved_to_a_colder_class(kit, target_class):
    _checkpoint, copy = kit.checkpoint(180, {"a": (b"a", "STANDARD")})
    target = kit.bucket()

    with pytest.raises(DomainError) as refused:
        promote(
            copy=copy, target_location=target.location, target_storage_class=target_class, actor=kit.actor, reason="x"
        )

    assert "colder" in refused.value.message or "archive class" in refused.value.message
    assert not PromotionJob.objects.exists()


# --- bad input changes nothing ------------------------------------------------------------------------


def test_bad_input_is_refused_with_a_reason_and_changes_nothing(kit):
    _checkpoint, copy = kit.checkpoint(190, {"a": (b"a", "STANDARD_IA")})
    _, partial = kit.checkpoint(191, {"a": (b"a", "STANDARD_IA")}, state=CopyState.PARTIAL)
    other, _ = kit.checkpoint(192, {"a": (b"a", "STANDARD_IA")})
    target = kit.bucket()
    before = AuditEvent.objects.count()
    cases = [
        ({"copy": copy, "reason": "  "}, "reason_required"),
        ({"copy": partial}, "copy_not_complete"),
        ({"copy": copy, "checkpoint": other}, "bad_source"),
        ({"copy": copy, "target_storage_class": "standard ia"}, "bad_storage_class"),
        ({"copy": copy, "target_location": kit.source.location}, "nothing_to_do"),
        (
            {"copy": copy, "target_location": kit.source.location, "target_storage_class": "STANDARD_IA"},
            "nothing_to_do",
        ),
        ({"copy": copy, "restore_days": 0}, "bad_restore_days"),
        ({"copy": copy, "restore_tier": "Instant"}, "bad_restore_tier"),
    ]
    for kwargs, code in cases:
        kwargs = {"target_location": target.location, "actor": kit.actor, "reason": "r", **kwargs}
        with pytest.raises(DomainError) as refused:
            promote(**kwargs)
        assert refused.value.code == code, (kwargs, refused.value.message)
        assert refused.value.message
    assert not PromotionJob.objects.exists()
    assert AuditEvent.objects.count() == before


def test_only_an_operator_may_promote_and_a_refusal_is_audited(kit):
    checkpoint, copy = kit.checkpoint(200, {"a": (b"a", "STANDARD_IA")})
    viewer = Actor(kind="user", label="vic", source="ui", user=kit.viewer)

    target = kit.bucket()
    with refusals_collected(source="ui"), pytest.raises(PermissionRefused, match="operator role"):
        promote(copy=copy, target_location=target.location, actor=viewer, reason="r")
    with pytest.raises(NotAuthenticated):
        promote(
            copy=copy, target_location=kit.source.location, actor=Actor(kind="user", label="x", source="ui"), reason="r"
        )

    assert not PromotionJob.objects.exists()
    refusals = events("access.refused")
    assert [(e.actor_label, e.target_id) for e in refusals] == [("vic", checkpoint.pk)]


def test_a_second_request_for_the_same_target_is_refused_while_the_first_is_open(kit):
    _checkpoint, copy = kit.checkpoint(210, {"a": (b"a", "GLACIER")})
    target = kit.bucket()
    promote(copy=copy, target_location=target.location, actor=kit.actor, reason="first")

    with pytest.raises(DomainError) as refused:
        promote(copy=copy, target_location=target.location, actor=kit.actor, reason="second")

    assert refused.value.code == "promotion_open"
    assert PromotionJob.objects.count() == 1


def test_cancel_writes_one_event_stops_the_job_and_cannot_be_repeated(kit, django_capture_on_commit_callbacks):
    _checkpoint, copy = kit.checkpoint(220, {"a": (b"a" * 7, "GLACIER")})
    target = kit.bucket()
    kit.restores_take(4)
    job = start(kit, django_capture_on_commit_callbacks, copy=copy, target_location=target.location)
    assert job.state == JobState.RESTORING

    cancel(job=job, actor=kit.actor, reason="not needed after all")
    kit.restores_take(0)
    runner.poll(job.pk)
    runner.copy(job.pk, claim="after-cancel")

    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and job.cancelled_label == "olga"
    assert [e.reason for e in events("promotion.cancel")] == ["not needed after all"]
    assert not kit.s3.client.list_objects_v2(Bucket=target.bucket_name).get("Contents")
    with pytest.raises(DomainError) as again:
        cancel(job=job, actor=kit.actor)
    assert again.value.code == "not_open"
    assert len(events("promotion.cancel")) == 1


def test_a_host_target_records_an_agent_pull_with_the_exact_files(kit, make_host):
    _checkpoint, copy = kit.checkpoint(230, {"a": (b"a" * 4, "STANDARD"), "b": (b"b", "STANDARD")})
    host = make_host()

    job = promote(copy=copy, target_location=host.location, actor=kit.actor, reason="restart on gpu-a01")

    assert (job.method, job.state, job.target_tier) == (Method.AGENT_PULL, JobState.AWAITING_AGENT, "nvme")
    assert list(job.items.order_by("path").values_list("source_key", "target_key", "size", "state")) == [
        ("llm/llama/step-230/a", "/mnt/nvme0/checkpoints/llm/llama/step-230/a", 4, ItemState.READY),
        ("llm/llama/step-230/b", "/mnt/nvme0/checkpoints/llm/llama/step-230/b", 1, ItemState.READY),
    ]
    assert len(events("promotion.request")) == 1


def test_the_plan_says_what_will_happen_with_bytes_tier_and_money(kit):
    from spend.prices import price_set

    _checkpoint, copy = kit.checkpoint(240, {"a": (b"a" * 1024, "GLACIER"), "b": (b"b" * 1024, "STANDARD_IA")})
    target = kit.bucket()
    price_set(tier="object_standard", price="0.023", effective_from=WHEN.date(), actor=Actor.command(label="t"))

    plan = promotion_plan(copy=copy, target_location=target.location, target_storage_class="STANDARD")

    assert (plan.method, plan.files, plan.bytes, plan.target_tier) == (Method.RESTORE, 2, 2048, "object_standard")
    assert (plan.archived_files, plan.archived_bytes) == (1, 1024)
    assert plan.cost_per_month is not None and plan.cost_per_month > 0
    assert plan.currency == "USD"
    assert any("Restore 1 archived object" in step for step in plan.steps)
