"""The GPUs a host has, from its registration: set by `fleet_host add --gpus` / `set-gpus` and the API, audited,
refused when not a GPU count, and a run's GPU count (catalog.recovery_point) when nothing closer says."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from audit.models import AuditEvent
from catalog.models import Run
from catalog.recovery_point import GpuSource, recovery_point_of
from fleet.models import Host
from tests.catalog.test_lifecycle_api import token_of

pytestmark = pytest.mark.django_db


def fleet_host(*args: str) -> str:
    out = io.StringIO()
    call_command("fleet_host", *args, stdout=out)
    return out.getvalue()


def test_registering_with_gpus_and_changing_them_is_audited():
    fleet_host("add", "gpu-b07", "--gpus", "8", "--root", "/mnt/nvme0/ckpt")
    host = Host.objects.get(name="gpu-b07")
    assert host.gpus == 8
    assert AuditEvent.objects.get(action="host.register", target_id=host.pk).after["gpus"] == 8
    assert "gpus=8" in fleet_host("list")
    assert "gpu-b07: 4 GPUs registered" in fleet_host("set-gpus", "gpu-b07", "4")
    assert "gpu-b07: no GPUs registered" in fleet_host("set-gpus", "gpu-b07", "none")
    changes = [
        (e.before["gpus"], e.after["gpus"]) for e in AuditEvent.objects.filter(action="host.gpus").order_by("pk")
    ]
    assert changes == [(8, 4), (4, None)]
    fleet_host("set-gpus", "gpu-b07", "none")  # no change: no event
    assert AuditEvent.objects.filter(action="host.gpus").count() == 2


@pytest.mark.parametrize("bad", ["-1", "eight", "5000", "2.5"])
def test_a_gpu_count_that_is_not_one_is_refused_and_changes_nothing(bad):
    with pytest.raises(CommandError, match="whole number from 0 to 4,096"):
        fleet_host("add", "gpu-b08", "--gpus", bad)
    assert not Host.objects.filter(name="gpu-b08").exists()
    fleet_host("add", "gpu-b09", "--gpus", "8")
    with pytest.raises(CommandError, match="whole number from 0 to 4,096"):
        fleet_host("set-gpus", "gpu-b09", bad)
    assert Host.objects.get(name="gpu-b09").gpus == 8


def test_the_api_sets_them_for_an_operator_only(client, django_user_model):
    fleet_host("add", "gpu-b10")
    host = Host.objects.get(name="gpu-b10")
    url = f"/api/v1/hosts/{host.pk}/gpus/"
    viewer = token_of(django_user_model, "vic", "viewer")
    operator = token_of(django_user_model, "olga", "operator")
    refused = client.post(url, json.dumps({"gpus": 8}), content_type="application/json", **viewer)
    assert refused.status_code == 403 and Host.objects.get(pk=host.pk).gpus is None
    for body in ({"gpus": "many"}, {"gpus": True}, {"gpu": 8}, [8]):
        bad = client.post(url, json.dumps(body), content_type="application/json", **operator)
        assert bad.status_code == 400, body
    done = client.post(url, json.dumps({"gpus": 8}), content_type="application/json", **operator)
    assert done.status_code == 200 and done.json()["gpus"] == 8
    assert client.get(f"/api/v1/hosts/{host.pk}/", **viewer).json()["gpus"] == 8
    assert AuditEvent.objects.get(action="host.gpus").actor_label == "olga"


def test_a_runs_gpus_come_from_its_hosts_when_nothing_closer_says(make_host, push, client, django_user_model):
    """A Lightning checkpoint records no world size: the run's GPUs are those of the hosts holding it."""
    a, b = make_host("gpu-c01"), make_host("gpu-c02", root="/mnt/nvme1/ckpt")
    lightning = [{"path": "vision/resnet/epoch=0-step=100.ckpt", "size": 40960, "mtime": 1763700000.0}]
    push(a, lightning)
    push(b, lightning)
    run = Run.objects.get(name="resnet")
    assert recovery_point_of(run).gpus is None
    fleet_host("set-gpus", "gpu-c01", "8")
    fleet_host("set-gpus", "gpu-c02", "4")
    point = recovery_point_of(run)
    assert (point.gpus, point.gpus_source) == (12, GpuSource.HOSTS)
    assert "fleet_host --gpus" in point.gpus_source_label
    operator = token_of(django_user_model, "olga", "operator")
    client.post(f"/api/v1/runs/{run.pk}/gpus/", json.dumps({"gpus": 16}), content_type="application/json", **operator)
    assert recovery_point_of(Run.objects.get(pk=run.pk)).gpus_source == GpuSource.OPERATOR  # a person's word wins
