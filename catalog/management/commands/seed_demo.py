"""Write a demo fleet in real checkpoint layouts and ingest it, so every page has something true to show.

    manage.py seed_demo            # idempotent: re-running re-scans and changes nothing
    manage.py seed_demo --reset    # rebuild the demo trees from scratch

The checkpoint trees are copies of the fixtures under tests/fixtures/trees/, written by the real
libraries (torch.distributed.checkpoint, huggingface_hub, ...), spread over several hosts and
broken the way real ones break: a rank that never finished writing, a truncated safetensors shard,
an interrupted save's temporary directory, a missing DeepSpeed data-parallel rank. Each host's
roots are walked by the real agent code and ingested through the same service as an upload.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from catalog.models import Team
from fleet import agent, ingest
from fleet.models import Host, StorageLocation
from fleet.services import Actor, host_register, inventory_receive, location_add

FIXTURES = Path(settings.BASE_DIR) / "tests" / "fixtures" / "trees"
DAY = 86400

# host -> (site, region, [(root name, kind, tier, [(fixture subtree, destination below root)])])
DEMO_HOSTS = {
    "gpu-a01": ("dc1", "eu-west", [("nvme0", "nvme", "nvme", [("nvme-a/llm", "llm"), ("nvme-a/vision", "vision")])]),
    "gpu-a02": ("dc1", "eu-west", [("nvme0", "nvme", "nvme", [("nvme-a/llm", "llm")])]),
    "gpu-b07": ("dc2", "us-east", [("nvme0", "nvme", "nvme", [("bucket/vision", "vision"), ("pfs/nlp", "nlp")])]),
    "lustre-gw1": (
        "dc1",
        "eu-west",
        [("lustre", "pfs", "pfs", [("pfs/llm", "llm"), ("pfs/speech", "speech"), ("pfs/nlp", "nlp")])],
    ),
}
COST_CENTERS = {
    "llm": "CC-4100 Foundation models",
    "vision": "CC-4200 Perception",
    "nlp": "CC-4300 Language",
    "speech": "CC-4400 Speech",
}


def _age_tree(root: Path, newest: float) -> None:
    """Give each checkpoint directory a plausible save time, older steps earlier, files before manifests."""
    dirs = sorted({p.parent for p in root.rglob("*") if p.is_file()}, key=lambda d: str(d))
    for index, directory in enumerate(reversed(dirs)):
        saved = newest - index * 6 * 3600
        for file in sorted(directory.iterdir()):
            if file.is_file():
                late = file.name in {
                    ".metadata",
                    "trainer_state.json",
                    "latest",
                    "_CHECKPOINT_METADATA",
                    "model.safetensors.index.json",
                    "latest_checkpointed_iteration.txt",
                }
                stamp = saved + (30 if late else 0)
                os.utime(file, (stamp, stamp))


def _break_things(host: str, root: Path) -> None:
    """Damage copies the way real saves fail, so the triage pages have real work."""
    if host == "gpu-a01":
        run = root / "llm" / "llama-tiny"
        # A job killed while the ranks were writing: step-300 has rank 0's file but no rank 1 and no .metadata.
        src = run / "step-100"
        dst = run / "step-300"
        shutil.copytree(src, dst)
        ranks = sorted(dst.glob("__1_*.distcp"))
        for extra in ranks:
            extra.unlink()
        # An interrupted save left its metadata temp file behind in step-400.
        tmp = run / "step-400"
        shutil.copytree(src, tmp)
        (tmp / ".metadata").rename(tmp / ".metadata.tmp")
    if host == "lustre-gw1":
        nlp = root / "nlp" / "gpt2-tiny"
        shards = sorted(nlp.glob("checkpoint-*/model-*.safetensors"))
        if shards:
            with shards[-1].open("r+b") as fh:  # a copy cut short by a full disk
                fh.truncate(max(0, shards[-1].stat().st_size - 64))
        speech = root / "speech" / "ds-tiny"
        steps = sorted(speech.glob("global_step*"))
        if steps:
            optim = sorted(steps[-1].glob("*zero_pp_rank_0_*optim_states.pt"))
            for f in optim:
                f.unlink()


class Command(BaseCommand):
    help = "Create (or refresh) the demo fleet and a demo login."

    def add_arguments(self, parser):
        parser.add_argument("--reset", action="store_true", help="rebuild the demo trees from the fixtures")
        parser.add_argument("--dir", default=str(Path(settings.VAR_DIR) / "demo"), help="where the trees go")

    def handle(self, *args, **opts):
        base = Path(opts["dir"]).resolve()
        if opts["reset"] and base.exists():
            shutil.rmtree(base)
        actor = Actor.command(label="manage.py seed_demo")
        for team, cc in COST_CENTERS.items():
            Team.objects.update_or_create(name=team, defaults={"cost_center": cc})
        now = time.time()
        for host_name, (site, region, roots) in DEMO_HOSTS.items():
            host = Host.objects.filter(name=host_name).first() or host_register(
                name=host_name, site=site, region=region, description="demo host", actor=actor
            )
            for root_name, kind, tier, trees in roots:
                root = base / host_name / root_name
                if not root.exists():
                    for subtree, dest in trees:
                        shutil.copytree(FIXTURES / subtree, root / dest)
                    _break_things(host_name, root)
                    _age_tree(root, now - 3600 - hash(host_name) % 7 * 3600)
                location = StorageLocation.objects.filter(host=host, root_path=str(root)).first()
                if location is None:
                    location = location_add(
                        host=host,
                        name=f"{host_name}:{root_name}",
                        kind=kind,
                        tier=tier,
                        root_path=str(root),
                        actor=actor,
                    )
                inventory = self._scan(host, root)
                self.stdout.write(
                    f"{host_name}:{root}: {inventory.files_count} files, {inventory.checkpoints_found} checkpoint "
                    f"copies ({inventory.status}{': ' + inventory.error if inventory.error else ''})"
                )
        self._demo_login()

    def _scan(self, host: Host, root: Path):
        with tempfile.TemporaryFile() as body:
            agent.write_inventory(body, root=str(root), host=host.name)
            body.seek(0)
            inventory = inventory_receive(host=host, stream=body, content_encoding="gzip")
        # Apply it now, so the command's output is the outcome; a worker that got there first wins the claim.
        ingest.ingest(inventory.pk)
        inventory.refresh_from_db()
        return inventory

    def _demo_login(self) -> None:
        user_model = get_user_model()
        password_file = Path(settings.VAR_DIR) / "demo-password"
        if not password_file.exists():
            password_file.write_text(secrets.token_urlsafe(12))
            password_file.chmod(0o600)
        password = password_file.read_text().strip()
        with transaction.atomic():
            user, _ = user_model.objects.get_or_create(username="demo", defaults={"email": "demo@example.com"})
            user.is_staff = True
            user.is_superuser = True
            user.set_password(password)
            user.save()
        self.stdout.write(f"demo login: user 'demo', password in {password_file} ({password})")
