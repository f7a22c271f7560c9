"""The checkpoint a run restores from: verified beats newer-but-unverified; partial and gone copies never count."""

from __future__ import annotations

import pytest
from django.utils import timezone

from catalog.choices import CopyState, Verification
from catalog.models import Checkpoint, CheckpointCopy
from catalog.recovery import newest_restorable, newest_restorable_ids
from tests.helpers.catalog import make_copy, make_location, make_run

pytestmark = pytest.mark.django_db


def both(run):
    """The single-run answer and the batch answer, which must agree."""
    checkpoint, verified = newest_restorable(run)
    batch = newest_restorable_ids([run.pk]).get(run.pk)
    assert batch == ((checkpoint.pk, verified) if checkpoint else None)
    return (checkpoint.step if checkpoint else None), verified


def test_a_run_without_a_complete_copy_has_nothing_to_restore():
    run = make_run()
    make_copy(run, 100, make_location(), state=CopyState.PARTIAL)
    assert both(run) == (None, False)


def test_the_newest_complete_copy_wins_when_none_is_verified():
    run = make_run()
    nvme = make_location()
    make_copy(run, 100, nvme)
    make_copy(run, 200, nvme)
    make_copy(run, 300, nvme, state=CopyState.CORRUPT)
    assert both(run) == (200, False)


def test_an_older_verified_checkpoint_beats_a_newer_unverified_one():
    run = make_run()
    nvme = make_location()
    old = make_copy(run, 100, nvme)
    old.verification = Verification.VERIFIED
    old.save()
    make_copy(run, 200, nvme)
    assert both(run) == (100, True)


def test_verification_and_completeness_must_hold_for_the_same_copy():
    run = make_run()
    a01, b02 = make_location("gpu-a01"), make_location("gpu-b02")
    complete_unverified = make_copy(run, 200, a01)
    partial_verified = make_copy(run, 200, b02, state=CopyState.PARTIAL)
    partial_verified.verification = Verification.VERIFIED
    partial_verified.save()
    make_copy(run, 100, a01)
    assert complete_unverified.checkpoint.step == 200
    assert both(run) == (200, False)


def test_a_gone_copy_does_not_count():
    run = make_run()
    nvme = make_location()
    make_copy(run, 100, nvme)
    newer = make_copy(run, 200, nvme)
    newer.gone_at = timezone.now()
    newer.save()
    assert both(run) == (100, False)


def test_a_stepped_checkpoint_beats_a_step_less_export():
    run = make_run()
    nvme = make_location()
    make_copy(run, 100, nvme)
    export = Checkpoint.objects.create(run=run, step=None, tag="final")
    CheckpointCopy.objects.create(
        checkpoint=export,
        location=nvme,
        path="vision/vit-huge/final",
        format="hf_safetensors",
        state=CopyState.COMPLETE,
    )
    assert both(run) == (100, False)
