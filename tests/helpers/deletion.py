"""Deletion jobs in the tests: an operator actor, a scanned checkpoint by step, and a grace period that is over."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from actions.models import DeletionJob
from audit.actor import Actor
from catalog.models import Checkpoint

OPERATOR = Actor.command(label="tests: operator")


def make_due(job: DeletionJob) -> None:
    """The grace period is over (as if seven days had passed)."""
    DeletionJob.objects.filter(pk=job.pk).update(execute_after=timezone.now() - timedelta(seconds=1))


def checkpoint(step: int, run: str = "llama-tiny") -> Checkpoint:
    return Checkpoint.objects.get(run__name=run, step=step)
