"""The demo fleet comes with a hold, a pin and a scheduled deletion, made through the services, once."""

from __future__ import annotations

from django.core.management import call_command

from actions.models import DeletionJob, Hold, Pin
from audit.models import AuditEvent


def test_the_demo_has_a_hold_a_pin_and_a_scheduled_deletion(db, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", dir=str(tmp_path / "demo"))
    hold, pin, job = Hold.objects.get(), Pin.objects.get(), DeletionJob.objects.get()
    assert hold.case_ref == "DEMO-LEGAL-1" and hold.placed_label == "demo-operator" and hold.active
    assert pin.active and job.items_total > 0 and job.checkpoint_id not in (hold.checkpoint_id, pin.checkpoint_id)
    assert AuditEvent.objects.filter(action__in=["checkpoint.pin", "hold.place", "deletion.schedule"]).count() == 3

    call_command("seed_demo", dir=str(tmp_path / "demo"))
    assert (Hold.objects.count(), Pin.objects.count(), DeletionJob.objects.count()) == (1, 1, 1)
