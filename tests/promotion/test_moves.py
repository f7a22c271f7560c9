"""Moves (demote, offload) against moto's S3 server: the plan's figures, the copy, the verification before the
source is freed, and the promises (held checkpoints left out and named, nothing freed before it verifies)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from access.roles import Role
from actions import services
from actions.models import DeletionJob, Hold
from actions.services import preview
from audit.actor import Actor
from catalog.choices import Verification
from catalog.models import Checkpoint, CheckpointCopy, ShardFile
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.models import PricePoint
from fleet.pricebook import utc_today
from promotion import moves, runner
from promotion.choices import Direction, ItemState, JobState, Method
from promotion.models import PromotionItem, PromotionJob
from promotion.tasks import advance_promotions
from tests.actions.conftest import as_ui, make_person
from tests.actions.test_execution import run_due
from tests.helpers.deletion import make_due
from tests.promotion.conftest import WHEN, events, step

pytestmark = pytest.mark.services

GIB = 1024**3


def hold(checkpoint, case="CASE-9"):
    return Hold.objects.create(
        run=checkpoint.run,
        checkpoint=checkpoint,
        reason="litigation",
        case_ref=case,
        placed_label="hana",
        placed_at=timezone.now(),
    )


def request(kit, capture, checkpoints, target, storage_class, **kwargs):
    kwargs.setdefault("actor", kit.actor)
    kwargs.setdefault("reason", "cold storage for finished runs")
    with capture(execute=True):
        jobs = moves.request_move(
            checkpoints=checkpoints, target_location=target.location, target_storage_class=storage_class, **kwargs
        )
    for job in jobs:
        job.refresh_from_db()
    return jobs


# --- demote in place and to another bucket -------------------------------------------------------------


def test_a_demotion_in_place_changes_the_class_of_every_object_and_needs_no_deletion(
    kit, scanned, django_capture_on_commit_callbacks
):
    checkpoint = step(200)
    (job,) = request(kit, django_capture_on_commit_callbacks, [checkpoint], scanned, "GLACIER_IR")

    assert (job.direction, job.method, job.in_place, job.state) == (
        Direction.DEMOTE,
        Method.COPY,
        True,
        JobState.COMPLETED,
    ), job.error
    assert job.source_outcome == moves.FREED_IN_PLACE
    assert job.verified_at is not None and job.source_deletion is None
    for item in job.items.all():
        assert kit.head(scanned.bucket_name, item.target_key)["StorageClass"] == "GLACIER_IR"
        assert item.verified_at is not None and item.detail.startswith("verified: sha256")
    assert not DeletionJob.objects.exists()
    assert [e.after["move"] for e in events("move.request")] == [job.pk]
    assert events("move.request")[0].after["method"] == "class_change"
    assert len(events("move.verified")) == 1 and len(events("move.complete")) == 1


def test_a_demotion_to_another_bucket_copies_verifies_and_then_schedules_the_sources_deletion(
    kit, scanned, django_capture_on_commit_callbacks
):
    cold = kit.bucket(prefix="fleet/")
    checkpoint = step(200)
    source_copy = CheckpointCopy.objects.get(checkpoint=checkpoint, location=scanned.location)

    (job,) = request(kit, django_capture_on_commit_callbacks, [checkpoint], cold, "GLACIER_IR")

    # The rescan after the copy shows the new copy (verified: its store checksums agree with the source's), so
    # the source's deletion is scheduled through the deletion service, with its grace period and rules.
    # The scan's checksums land after the first try to free the source, so beat's next round frees it.
    assert job.state == JobState.VERIFYING and job.verified_at is not None
    assert not DeletionJob.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        assert advance_promotions()["verify"] == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED, (job.error, job.source_outcome)
    new_copy = CheckpointCopy.objects.get(checkpoint=checkpoint, location=cold.location, gone_at__isnull=True)
    assert new_copy.verification == Verification.VERIFIED
    deletion = DeletionJob.objects.get()
    assert (deletion.copy_id, deletion.origin, deletion.requested_label) == (source_copy.pk, f"move:{job.pk}", "olga")
    assert job.source_deletion_id == deletion.pk
    assert "scheduled" in job.source_outcome
    for item in job.items.all():
        head = kit.head(cold.bucket_name, item.target_key)
        assert head["StorageClass"] == "GLACIER_IR"
        assert kit.body(cold.bucket_name, item.target_key) == kit.body(scanned.bucket_name, item.source_key)
    verified = events("move.verified")[0]
    deletion_event = events("deletion.schedule")[0]
    assert verified.id < deletion_event.id  # verified first, freed after

    # When the grace period ends the source goes, and the move's freeing is proved by listing the source again.
    while deletion.state == "awaiting_approval":  # a move's source needs approvers, as any large deletion
        approver = make_person(f"approver-{deletion.approvals_given}", Role.APPROVER)
        deletion = services.approve(job=deletion, actor=as_ui(approver))
    make_due(deletion)
    run_due(django_capture_on_commit_callbacks)
    deletion.refresh_from_db()
    assert deletion.state == "completed", deletion.outcome
    assert (deletion.proof_state, deletion.bytes_reclaimed) == ("confirmed", deletion.bytes_total)


def test_the_source_is_never_freed_when_a_new_object_does_not_match(
    kit, scanned, django_capture_on_commit_callbacks, monkeypatch
):
    cold = kit.bucket(prefix="fleet/")
    checkpoint = step(200)
    with django_capture_on_commit_callbacks(execute=False):  # the worker has not started yet
        (job,) = moves.request_move(
            checkpoints=[checkpoint],
            target_location=cold.location,
            target_storage_class="STANDARD_IA",
            actor=kit.actor,
            reason="cheaper",
        )
    victim = job.items.order_by("path").first()
    finish = runner.finish

    def overwrite_then_finish(job_id, **kwargs):
        # Between the copy and the verification something rewrites one new object with other bytes of its size.
        kit.s3.put(cold.bucket_name, victim.target_key, b"!" * victim.size, StorageClass="STANDARD_IA")
        return finish(job_id, **kwargs)

    monkeypatch.setattr(runner, "finish", overwrite_then_finish)
    with django_capture_on_commit_callbacks(execute=True):
        assert runner.start(job.pk) == JobState.FAILED

    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.verified_at is None
    assert job.error.startswith(f"{victim.path}: sha256 ")
    assert victim.sha256 in job.error and "the source is kept" in job.error
    assert not DeletionJob.objects.exists()
    assert not events("move.verified") and not events("move.complete")
    (fail,) = events("move.fail")
    assert fail.after["promotion"] == job.pk and fail.reason == job.error
    assert kit.body(scanned.bucket_name, victim.source_key)  # the source is untouched


def test_a_mismatch_names_the_file_and_both_values(kit, scanned, django_capture_on_commit_callbacks):
    cold = kit.bucket(prefix="fleet/")
    checkpoint = step(200)
    with django_capture_on_commit_callbacks(execute=False):
        (job,) = moves.request_move(
            checkpoints=[checkpoint],
            target_location=cold.location,
            target_storage_class="GLACIER_IR",
            actor=kit.actor,
            reason="cold",
        )
    PromotionJob.objects.filter(pk=job.pk).update(state=JobState.COPYING)
    runner.copy(job.pk, claim="w1")  # copied and verified: completes the verification
    job.refresh_from_db()
    assert job.state == JobState.VERIFYING and job.verified_at is not None

    # The same check, on an object overwritten after its copy: the verification stops it.
    item = job.items.order_by("path").last()
    kit.s3.put(cold.bucket_name, item.target_key, b"tampered", StorageClass="GLACIER_IR")
    with pytest.raises(moves.Mismatch) as caught:
        moves.verify_object(kit.s3.client, cold.bucket_name, item, job, scanned)
    assert "size 8 bytes at the target" in str(caught.value)
    kit.s3.put(cold.bucket_name, item.target_key, b"x" * item.size, StorageClass="GLACIER_IR")
    with pytest.raises(moves.Mismatch) as caught:
        moves.verify_object(kit.s3.client, cold.bucket_name, item, job, scanned)
    assert item.sha256 in str(caught.value) and "at the target" in str(caught.value)


# --- promises and refusals --------------------------------------------------------------------------------


def test_a_held_checkpoint_in_a_run_move_is_left_out_and_named(kit, scanned, django_capture_on_commit_callbacks):
    cold = kit.bucket(prefix="fleet/")
    held = step(100)
    hold(held, case="CASE-9")
    run_checkpoints = Checkpoint.objects.filter(run__name="llama-tiny")

    plan = moves.move_plan(
        checkpoints=run_checkpoints, target_location=cold.location, target_storage_class="GLACIER_IR"
    )
    assert [line.checkpoint for line in plan.lines] == [step(200)]
    assert [(e.checkpoint, e.code) for e in plan.excluded] == [(held, "held")]
    assert "CASE-9" in plan.excluded[0].reason

    jobs = request(kit, django_capture_on_commit_callbacks, run_checkpoints, cold, "GLACIER_IR")
    assert [j.checkpoint for j in jobs] == [step(200)]
    assert events("move.request")[0].after["excluded"][0]["checkpoint"] == held.pk
    assert not PromotionJob.objects.filter(checkpoint=held).exists()


def test_a_hold_placed_after_the_request_lets_the_copy_finish_but_keeps_the_source(
    kit, scanned, django_capture_on_commit_callbacks
):
    cold = kit.bucket(prefix="fleet/")
    checkpoint = step(200)
    with django_capture_on_commit_callbacks(execute=False):
        (job,) = moves.request_move(
            checkpoints=[checkpoint],
            target_location=cold.location,
            target_storage_class="GLACIER_IR",
            actor=kit.actor,
            reason="cold",
        )
    hold(checkpoint, case="CASE-11")
    with django_capture_on_commit_callbacks(execute=True):
        runner.start(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED
    assert job.source_outcome == "source kept: held (case CASE-11)"
    assert not DeletionJob.objects.exists()


def test_only_an_operator_may_move_and_bad_input_changes_nothing(kit, scanned):
    cold = kit.bucket(prefix="fleet/")
    viewer = Actor(kind="user", label="vic", source="api", user=kit.viewer)
    with pytest.raises(PermissionRefused):
        moves.request_move(
            checkpoints=[step(200)],
            target_location=cold.location,
            target_storage_class="GLACIER_IR",
            actor=viewer,
            reason="x",
        )
    for kwargs, code in [
        ({"target_storage_class": "GLACIER_IR", "reason": ""}, "reason_required"),
        ({"target_storage_class": "PLATINUM", "reason": "x"}, "bad_storage_class"),
        ({"target_storage_class": "", "reason": "x"}, "bad_storage_class"),
    ]:
        with pytest.raises(DomainError) as caught:
            moves.request_move(checkpoints=[step(200)], target_location=cold.location, actor=kit.actor, **kwargs)
        assert caught.value.code == code
    assert not PromotionJob.objects.exists()
    assert not events("move.request")


def test_a_hotter_target_is_a_promotion_and_is_left_out(kit, scanned, django_capture_on_commit_callbacks):
    cold = kit.bucket(prefix="fleet/")
    request(kit, django_capture_on_commit_callbacks, [step(200)], scanned, "GLACIER_IR")  # in place, now colder
    plan = moves.move_plan(checkpoints=[step(200)], target_location=cold.location, target_storage_class="STANDARD")
    assert not plan.lines and plan.excluded[0].code == "would_promote"
    with pytest.raises(DomainError) as caught:
        moves.request_move(
            checkpoints=[step(200)],
            target_location=cold.location,
            target_storage_class="STANDARD",
            actor=kit.actor,
            reason="x",
        )
    assert caught.value.code == "nothing_to_move" and "promotion" in caught.value.message


# --- resume ------------------------------------------------------------------------------------------------


def test_a_move_killed_half_way_resumes_without_copying_twice_or_losing_a_byte(
    kit, scanned, django_capture_on_commit_callbacks, settings
):
    settings.PROMOTION_COPY_CONCURRENCY = 1
    cold = kit.bucket(prefix="fleet/")
    checkpoint = step(200)
    with django_capture_on_commit_callbacks(execute=False):
        (job,) = moves.request_move(
            checkpoints=[checkpoint],
            target_location=cold.location,
            target_storage_class="STANDARD_IA",
            actor=kit.actor,
            reason="cold",
        )
    PromotionJob.objects.filter(pk=job.pk).update(state=JobState.COPYING)
    copies: list[str] = []
    original = runner.s3.copy_object

    def dies_after_two(client, **kwargs):
        if len(copies) == 2:
            raise SystemExit("worker killed")  # the process dies mid-job: nothing after this runs
        copies.append(kwargs["target_key"])
        return original(client, **kwargs)

    runner.s3.copy_object = dies_after_two
    try:
        with pytest.raises(SystemExit):
            runner.copy(job.pk, claim="first-worker")
    finally:
        runner.s3.copy_object = original
    job.refresh_from_db()
    assert job.state == JobState.COPYING and job.items_done == 2

    # Another delivery may not take the job while the first one's lease is fresh; once it expires it carries on.
    assert runner.copy(job.pk, claim="second-worker") == "skipped"
    PromotionJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
    assert job.pk in runner.due_jobs()["copy"]
    again: list[str] = []

    def counting(client, **kwargs):
        again.append(kwargs["target_key"])
        return original(client, **kwargs)

    runner.s3.copy_object = counting
    try:
        runner.copy(job.pk, claim="second-worker")
    finally:
        runner.s3.copy_object = original
    job.refresh_from_db()
    assert job.state == JobState.VERIFYING and job.verified_at is not None, job.error
    assert not set(copies) & set(again)  # nothing copied twice
    assert len(copies) + len(again) == job.items_total
    assert job.bytes_done == job.bytes_total == sum(i.size for i in job.items.all())
    for item in job.items.all():
        assert kit.body(cold.bucket_name, item.target_key) == kit.body(scanned.bucket_name, item.source_key)


# --- the plan's money ----------------------------------------------------------------------------------------


def test_the_plan_prices_saving_early_deletion_requests_archive_overhead_and_payback(kit):
    for tier, storage_class, price in [
        ("object_standard", "STANDARD", "0.023"),
        ("archive", "GLACIER", "0.0036"),
    ]:
        PricePoint.objects.create(
            tier=tier,
            storage_class=storage_class,
            price_per_gib_month=Decimal(price),
            entered_price=Decimal(price),
            effective_from=date(2000, 1, 1),
        )
    body = b"z" * 1000
    checkpoint, copy = kit.checkpoint(300, {"a": (body, "STANDARD"), "b": (body, "STANDARD")})
    ShardFile.objects.filter(copy=copy).update(size=100 * GIB, mtime=timezone.now() - timedelta(days=100))
    cold = kit.bucket()

    plan = moves.move_plan(checkpoints=[checkpoint], target_location=cold.location, target_storage_class="GLACIER")
    (line,) = plan.lines
    assert (line.files, line.bytes, line.in_place, line.method) == (2, 200 * GIB, False, Method.COPY)
    assert line.source_cost_per_month == Decimal("4.6")  # 200 GiB x 0.023
    # 200 GiB x 0.0036, plus 2 objects x (32 KiB x 0.0036 + 8 KiB x 0.023) per GiB
    overhead = 2 * (Decimal("0.0036") * 32 * 1024 + Decimal("0.023") * 8 * 1024) / GIB
    assert line.archive_overhead_per_month == overhead
    assert line.target_cost_per_month == Decimal("0.72") + overhead
    assert line.early_deletion == 0  # STANDARD has no minimum duration
    # Each 100 GiB object is a multipart copy: Create, 200 UploadPartCopy of 512 MiB, Complete = 202 requests;
    # 404 requests at 0.03 USD per 1,000 into GLACIER.
    assert line.requests == Decimal("404") * Decimal("0.03") / 1000
    assert line.payback_days == 1
    assert line.freeing == moves.FREED_BY_DELETION
    assert plan.as_dict()["saving_per_month"] == "3.88"
    assert "deletion" in plan.approval_note and "approval" in plan.approval_note

    # Young GLACIER_IR objects moved on to DEEP_ARCHIVE in place: 60 of 90 days left are billed.
    PricePoint.objects.create(
        tier="archive_instant",
        storage_class="GLACIER_IR",
        price_per_gib_month=Decimal("0.004"),
        entered_price=Decimal("0.004"),
        effective_from=date(2000, 1, 1),
    )
    PricePoint.objects.create(
        tier="deep_archive",
        storage_class="DEEP_ARCHIVE",
        price_per_gib_month=Decimal("0.00099"),
        entered_price=Decimal("0.00099"),
        effective_from=date(2000, 1, 1),
    )
    # Written 30 UTC calendar days ago, at 23:59: ages count in calendar days, as every page counts them.
    written = datetime.combine(utc_today() - timedelta(days=30), time(23, 59), tzinfo=UTC)
    ShardFile.objects.filter(copy=copy).update(storage_class="GLACIER_IR", tier="archive_instant", mtime=written)
    plan = moves.move_plan(
        checkpoints=[checkpoint], target_location=kit.source.location, target_storage_class="DEEP_ARCHIVE"
    )
    (line,) = plan.lines
    assert line.in_place and line.freeing == moves.FREED_IN_PLACE
    assert line.early_deletion == Decimal("0.004") * 200 * 60 / 30  # 1.60
    assert line.young_files == 2
    assert plan.as_dict()["early_deletion"] == "1.60"
    # Deleting that copy instead is billed the same: one rule (catalog.early_deletion) for both pages.
    assert preview(checkpoint=checkpoint, copy=copy).early_deletion.charge == line.early_deletion
    assert line.payback_days is not None and line.payback_days > 30
    assert plan.stays_hot == {checkpoint.run_id: None}  # deep archive is not readable without a restore


def test_copied_refuses_a_promotion(kit, django_capture_on_commit_callbacks):
    from promotion.services import promote

    _checkpoint, copy = kit.checkpoint(310, {"a": (b"a", "STANDARD_IA")})
    with django_capture_on_commit_callbacks(execute=False):
        job = promote(
            copy=copy,
            target_location=kit.source.location,
            target_storage_class="STANDARD",
            actor=kit.actor,
            reason="hot",
        )
    with pytest.raises(DomainError):
        moves.copied(job.pk)
    assert PromotionItem.objects.filter(job=job, state=ItemState.READY).count() == 1
    assert WHEN  # the kit's fixed time is what the files were written at


# --- offload: the request freezes the host's files for its agent; copied() verifies what the agent uploaded ------


def host_checkpoint(kit, host, step: int, bodies: dict[str, bytes]):
    import hashlib

    checkpoint = Checkpoint.objects.create(run=kit.run, step=step)
    path = f"llm/llama/step-{step}"
    copy = CheckpointCopy.objects.create(
        checkpoint=checkpoint,
        location=host.location,
        path=path,
        format="pytorch_dcp",
        state="complete",
        verification=Verification.VERIFIED,
        file_count=len(bodies),
        bytes=sum(map(len, bodies.values())),
    )
    for name, body in bodies.items():
        ShardFile.objects.create(
            location=host.location,
            path=f"{path}/{name}",
            size=len(body),
            mtime=WHEN,
            tier="nvme",
            checksum=hashlib.sha256(body).hexdigest(),
            checksum_algo="sha256",
            copy=copy,
            first_seen_at=WHEN,
            changed_at=WHEN,
        )
    return checkpoint


def test_an_offload_is_frozen_for_the_hosts_agent_and_verified_before_the_host_copy_is_freed(kit, make_host):
    host = make_host()
    bodies = {"a": b"a" * 300, "b": b"b" * 200}
    checkpoint = host_checkpoint(kit, host, 900, bodies)
    cold = kit.bucket(prefix="fleet/")

    (job,) = moves.request_move(
        checkpoints=[checkpoint],
        target_location=cold.location,
        target_storage_class="GLACIER_IR",
        actor=kit.actor,
        reason="finished run: off the GPU host",
    )
    assert (job.direction, job.method, job.state) == (Direction.OFFLOAD, Method.AGENT_PUSH, JobState.AWAITING_AGENT)
    items = list(job.items.order_by("path"))
    assert [(i.source_key, i.target_key, i.size) for i in items] == [
        ("/mnt/nvme0/checkpoints/llm/llama/step-900/a", "fleet/llm/llama/step-900/a", 300),
        ("/mnt/nvme0/checkpoints/llm/llama/step-900/b", "fleet/llm/llama/step-900/b", 200),
    ]
    assert all(len(i.sha256) == 64 for i in items)
    assert events("move.request")[0].after["method"] == Method.AGENT_PUSH

    # The agent uploads (here: the test), and one file arrives with other bytes.
    kit.s3.put(cold.bucket_name, items[0].target_key, bodies["a"], StorageClass="GLACIER_IR")
    kit.s3.put(cold.bucket_name, items[1].target_key, b"B" * 200, StorageClass="GLACIER_IR")
    job.items.update(state=ItemState.DONE)
    assert moves.copied(job.pk) == JobState.FAILED
    job.refresh_from_db()
    assert job.error.startswith("llm/llama/step-900/b: sha256 ") and "the source is kept" in job.error
    assert not DeletionJob.objects.exists()


def test_copied_verifies_an_offload_and_waits_for_the_catalog_before_freeing(kit, make_host):
    host = make_host()
    bodies = {"a": b"a" * 300}
    checkpoint = host_checkpoint(kit, host, 910, bodies)
    cold = kit.bucket(prefix="fleet/")
    (job,) = moves.request_move(
        checkpoints=[checkpoint],
        target_location=cold.location,
        target_storage_class="STANDARD_IA",
        actor=kit.actor,
        reason="off the host",
    )
    kit.s3.put(cold.bucket_name, "fleet/llm/llama/step-910/a", bodies["a"], StorageClass="STANDARD_IA")
    job.items.update(state=ItemState.DONE)

    assert moves.copied(job.pk) == JobState.VERIFYING  # verified; the catalog has no copy at the bucket yet
    job.refresh_from_db()
    assert job.verified_at is not None and not DeletionJob.objects.exists()
    assert moves.copied(job.pk) == JobState.VERIFYING  # a second call changes nothing
    assert len(events("move.verified")) == 1


def test_a_policy_may_ask_for_a_move_and_frees_the_source_as_itself(kit, scanned, django_capture_on_commit_callbacks):
    cold = kit.bucket(prefix="fleet/")
    policy = Actor.system("tiering policy 3")
    jobs = request(
        kit,
        django_capture_on_commit_callbacks,
        [step(200), step(100)],
        cold,
        "GLACIER_IR",
        actor=policy,
        origin="policy:3",
    )
    # A policy moves verified copies only (fail closed): step 100's copy has no checksum written at save time.
    assert [j.checkpoint for j in jobs] == [step(200)]
    (job,) = jobs
    assert (job.requested_by, job.requested_label, job.origin) == (None, "tiering policy 3", "policy:3")
    assert events("move.request")[0].after["excluded"][0]["code"] == "unverified"
    with django_capture_on_commit_callbacks(execute=True):
        advance_promotions()
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED, (job.error, job.source_outcome)
    deletion = DeletionJob.objects.get()
    assert (deletion.requested_label, deletion.origin) == ("tiering policy 3", f"move:{job.pk}")
    with pytest.raises(DomainError):
        moves.request_move(
            checkpoints=[step(100)],
            target_location=cold.location,
            target_storage_class="GLACIER_IR",
            actor=policy,
            reason="x",
            origin="cron",
        )


def test_a_copy_lists_its_targets_once_and_still_never_overwrites_another_object(
    kit, scanned, django_capture_on_commit_callbacks, monkeypatch
):
    monkeypatch.setattr(runner, "LIST_AT_LEAST", 1)  # the tree is small: list it as a big batch would be
    cold = kit.bucket(prefix="fleet/")
    checkpoint = step(200)
    with django_capture_on_commit_callbacks(execute=False):
        (job,) = moves.request_move(
            checkpoints=[checkpoint],
            target_location=cold.location,
            target_storage_class="STANDARD_IA",
            actor=kit.actor,
            reason="cold",
        )
    PromotionJob.objects.filter(pk=job.pk).update(state=JobState.COPYING)
    taken = job.items.order_by("path").first()
    kit.s3.put(cold.bucket_name, taken.target_key, b"someone else's", StorageClass="STANDARD_IA")
    heads: list[str] = []
    real = runner.s3.object_state

    def counting(client, bucket, key, **kwargs):
        if bucket == cold.bucket_name:
            heads.append(key)
        return real(client, bucket, key, **kwargs)

    monkeypatch.setattr(runner.s3, "object_state", counting)
    with django_capture_on_commit_callbacks(execute=True):
        assert runner.copy(job.pk, claim="w1") == JobState.FAILED

    assert heads == [taken.target_key]  # only the key the listing showed taken was HEADed
    assert kit.body(cold.bucket_name, taken.target_key) == b"someone else's"  # never overwritten
    taken.refresh_from_db()
    assert taken.state == ItemState.BLOCKED and "never overwritten" in taken.detail
    others = job.items.exclude(pk=taken.pk)
    assert others.exists() and all(i.state == ItemState.DONE for i in others)
    for item in others:
        assert kit.body(cold.bucket_name, item.target_key) == kit.body(scanned.bucket_name, item.source_key)
    job.refresh_from_db()
    assert job.items_done == others.count() and job.items_blocked == 1 and "the source is kept" in job.error
