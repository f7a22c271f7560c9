"""For the browser tests: full-page screenshots kept as test artefacts, the seeded demo, and its checkpoints."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Screenshots are test artefacts: `make test` keeps them in var/test-artefacts/<database>/.
ARTIFACTS = Path(os.environ.get("CKPTFLEET_ARTEFACTS", Path(__file__).resolve().parents[2] / "var" / "test-artefacts"))


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


@dataclass
class Demo:
    url: str
    password: str
    trees: Path  # where seed_demo wrote the hosts' checkpoint trees


def checkpoint_of(run_name: str, step: int):
    from catalog.models import Checkpoint

    return Checkpoint.objects.select_related("run__team").get(run__name=run_name, step=step)
