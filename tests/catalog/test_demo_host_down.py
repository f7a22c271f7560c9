"""The demo with gpu-c12 marked down (issue 27's "done when"): for every run, the recovery page, both recovery-point
APIs, the recovery API, the resume answer and the ladder give the same checkpoint and the same loss; and the run
whose every copy is on gpu-c12 (llm/llama3-70b) is named by none of them."""

from __future__ import annotations

import pytest
import time_machine
from django.utils import timezone

from audit.actor import Actor
from catalog.models import Run, Team
from catalog.recovery_point import team_rpo_set
from fleet.models import Host
from tests.helpers.demo_seed import seed_demo
from tests.helpers.recovery import answers

pytestmark = pytest.mark.django_db


def test_with_gpu_c12_down_every_surface_gives_every_demo_run_the_same_answer(settings, tmp_path_factory, signed_in_as):
    seed_demo(settings, tmp_path_factory.getbasetemp())
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
    big = said["llm/llama3-70b"]
    assert big["resume"][0] is None and big["recovery-point API"][0] is None
    page = operator.get(f"/recovery/{Run.objects.get(name='llama3-70b').pk}/").content.decode()
    assert "Nothing to restore" in page and "gpu-c12 is marked down" in page
    overview = operator.get("/").content.decode()
    assert 'id="host-down-losses"' in overview and "llm/llama3-70b" in overview
