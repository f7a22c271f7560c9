"""The demo with gpu-c12 marked down (issue 27's "done when"): for every run, the recovery page, both recovery-point
APIs, the recovery API, the resume answer and the ladder give the same checkpoint and the same loss; and the run
whose every copy is on gpu-c12 (llm/llama3-70b) is named by none of them."""

from __future__ import annotations

import io

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from audit.actor import Actor
from catalog.models import Checkpoint, Run, Team
from catalog.recovery_point import team_rpo_set
from fleet.models import Host
from tests.helpers.demo_seed import seed_demo
from tests.helpers.recovery import answers

pytestmark = pytest.mark.django_db


def _mark_c12_down_and_ask_every_surface(signed_in_as) -> tuple[object, dict[str, dict]]:
    operator = signed_in_as("operator", username="oncall")
    c12 = Host.objects.get(name="gpu-c12")
    assert (
        operator.post(
            f"/api/v1/hosts/{c12.pk}/down/", {"reason": "INC-4211 node failure"}, content_type="application/json"
        ).status_code
        == 200
    )
    for team in Team.objects.all():  # every active run over its objective, so that the fleet list shows it too
        team_rpo_set(team=team, hours=0.001, actor=Actor.system("test"))
    Run.objects.update(rpo_hours=None)
    with time_machine.travel(timezone.now(), tick=False):
        said = {f"{run.team.name}/{run.name}": answers(operator, run) for run in Run.objects.select_related("team")}
    for run, surfaces in said.items():
        assert len(set(surfaces.values())) == 1, (run, surfaces)
    return operator, said


def test_with_gpu_c12_down_every_surface_gives_every_demo_run_the_same_answer(settings, tmp_path_factory, signed_in_as):
    seed_demo(settings, tmp_path_factory.getbasetemp())
    operator, said = _mark_c12_down_and_ask_every_surface(signed_in_as)
    big = said["llm/llama3-70b"]
    assert big["resume"][0] is None and big["recovery-point API"][0] is None
    page = operator.get(f"/recovery/{Run.objects.get(name='llama3-70b').pk}/").content.decode()
    assert "Nothing to restore" in page and "gpu-c12 is marked down" in page
    overview = operator.get("/").content.decode()
    assert 'id="host-down-losses"' in overview and "llm/llama3-70b" in overview


def test_with_the_demos_buckets_the_70b_run_falls_back_to_its_bucket_copy_on_every_surface(
    settings, tmp_path, s3, signed_in_as, django_capture_on_commit_callbacks
):
    """`make demo` has buckets (moto): llm/llama3-70b's step 40,000 is in ckpt-prod-us, its newer saves only on
    gpu-c12. With gpu-c12 down every surface names step 40,000 and the same loss (main named step 41,000 with 0
    steps lost on the recovery page and both recovery-point APIs, and nothing in the resume answer)."""
    settings.VAR_DIR = tmp_path
    settings.S3_SECRETS_DIR = tmp_path / "s3-secrets"
    with django_capture_on_commit_callbacks(execute=True):
        call_command("seed_demo", dir=str(tmp_path / "demo"), s3_endpoint=s3.url, stdout=io.StringIO())
    _operator, said = _mark_c12_down_and_ask_every_surface(signed_in_as)
    [answer] = set(said["llm/llama3-70b"].values())
    newest = Checkpoint.objects.filter(run__name="llama3-70b").order_by("-step").first()
    assert answer[0] is not None and answer[0] != newest.pk  # a checkpoint, not the newest (only on gpu-c12)
    assert Checkpoint.objects.get(pk=answer[0]).step == 40_000
    print("llm/llama3-70b with gpu-c12 down, every surface:", answer)
