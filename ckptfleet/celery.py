"""The Celery application. Periodic work is scheduled in code (``beat_schedule``), not in the database."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ckptfleet.settings")

app = Celery("ckptfleet")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.beat_schedule = {
    "sweep-inventories": {"task": "fleet.tasks.sweep_inventories", "schedule": 600.0},
}
