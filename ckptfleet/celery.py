"""The Celery application. Periodic work is scheduled in code (``beat_schedule``), not in the database."""

import os
from importlib import import_module

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ckptfleet.settings")

# Every task's base class bounds how often one message is delivered (a message that kills its worker).
app = Celery("ckptfleet", task_cls="ckptfleet.deliveries:GuardedTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.beat_schedule = {
    "sweep-inventories": {"task": "ingest.tasks.sweep_inventories", "schedule": 600.0},
    # Each bucket has its own interval (Bucket.scan_every_minutes); this only looks for the due ones.
    "scan-due-buckets": {"task": "ingest.tasks.scan_due_buckets", "schedule": 60.0},
    # Daily usage of locations without a fresh inventory; hourly so that a missed run costs an hour, not a day.
    "carry-usage-forward": {"task": "ingest.tasks.carry_usage_forward", "schedule": 3600.0},
    # Retention policies propose deletions once a day; each still waits for approval and the grace period.
    "propose-retention-deletions": {"task": "retention.tasks.propose_retention_deletions", "schedule": 86400.0},
    # Leases that expired unreleased: they lapsed by themselves; this writes the lease.lapse audit event.
    "record-lease-lapses": {"task": "actions.tasks.record_lease_lapses", "schedule": 300.0},
    # Restore drills: a sample of each team's trusted checkpoints read back and checked (catalog.drills).
    "run-restore-drills": {"task": "catalog.tasks.run_restore_drills", "schedule": 86400.0},
    # Tiering policies: each enabled one runs every `every_hours`; this looks for the due ones.
    "run-due-tiering-policies": {"task": "retention.tasks.run_due_tiering_policies", "schedule": 900.0},
    # Deletions whose grace period ended start here; running ones without progress for a while are resent.
    "start-due-deletions": {"task": "actions.tasks.start_due_deletions", "schedule": 60.0},
    # Soft-deleted objects and files whose recovery window ended are purged from the trash.
    "purge-trash": {"task": "actions.tasks.purge_trash", "schedule": 3600.0},
    # Promotions: restores due for a status poll (each job every PROMOTION_POLL_SECONDS), and lost jobs resent.
    "advance-promotions": {"task": "promotion.tasks.advance_promotions", "schedule": 60.0},
    # The audit chain's head written outside the database, and the chain checked against those anchors.
    "anchor-audit-chain": {"task": "audit.tasks.anchor_audit_chain", "schedule": 60.0 * settings.AUDIT_ANCHOR_MINUTES},
    "verify-audit-chain": {
        "task": "audit.tasks.verify_audit_scheduled",
        "schedule": 60.0 * settings.AUDIT_VERIFY_MINUTES,
    },
    # Runs with no new checkpoint for CKPTFLEET_RUN_IDLE_DAYS are marked finished ("inferred").
    "infer-ended-runs": {"task": "catalog.tasks.infer_ended_runs", "schedule": 86400.0},
    # Governance holds' Object Lock retention is a rolling date: moved on daily once half of it is left.
    "renew-governance-holds": {"task": "actions.objectlock.renew_governance_task", "schedule": 86400.0},
}


def task(name: str):
    """The task registered as ``name`` (``"ingest.tasks.scan_bucket"``). A module whose work a task module runs
    starts that task by name, through here, rather than importing the task module that imports it. The task's
    module is loaded on first use where autodiscovery has not run yet (tasks in-process, a test)."""
    if name not in app.tasks:
        import_module(name.rpartition(".")[0])
    return app.tasks[name]
