"""factory_boy factories for the models tests build most: teams, runs, checkpoints, hosts, locations, copies, files.

Each factory makes a valid row with the least said: ``CheckpointCopyFactory()`` alone makes its team, run,
checkpoint, host and location too. Names that must be unique come from sequences; teams and hosts are
fetched when they already exist (``TeamFactory(name="llm")`` twice is one team). A copy's files:

    CheckpointCopyFactory(checkpoint=ck, location=nvme, files=3, size=1024, shards=True)

makes the copy with ``file_count=3`` and ``bytes=3072`` and, with ``shards=True``, its three ShardFile
rows ``<path>/model-00000.safetensors`` ... (etags ``etag0`` ...), as the ingest would leave them.
"""

from __future__ import annotations

import factory
from django.utils import timezone
from factory.django import DjangoModelFactory

from catalog.choices import CopyState, Importance
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
from fleet.models import Host, StorageLocation


class TeamFactory(DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"team-{n}")


class RunFactory(DjangoModelFactory):
    class Meta:
        model = Run

    team = factory.SubFactory(TeamFactory)
    name = factory.Sequence(lambda n: f"run-{n}")


class CheckpointFactory(DjangoModelFactory):
    class Meta:
        model = Checkpoint

    run = factory.SubFactory(RunFactory)
    step = factory.Sequence(lambda n: (n + 1) * 100)
    importance = Importance.ROUTINE


class HostFactory(DjangoModelFactory):
    class Meta:
        model = Host
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"gpu-{n:03d}")
    site = "dc1"
    region = "eu-west"


class StorageLocationFactory(DjangoModelFactory):
    """A host's NVMe root by default; ``StorageLocationFactory(bucket=True)`` is a bucket (no host)."""

    class Meta:
        model = StorageLocation

    class Params:
        bucket = factory.Trait(
            host=None,
            kind="bucket",
            tier="object_standard",
            root_path="",
            name=factory.Sequence(lambda n: f"s3://bucket-{n}"),
        )

    host = factory.SubFactory(HostFactory)
    kind = "nvme"
    tier = "nvme"
    root_path = "/mnt/nvme0"
    name = factory.LazyAttribute(lambda o: f"{o.host.name}:{o.root_path}")
    # As if an inventory had just been applied: a policy acts only where the evidence is fresh (promise 12).
    last_applied_at = factory.LazyFunction(timezone.now)


class CheckpointCopyFactory(DjangoModelFactory):
    """A copy at ``<team>/<run>/checkpoint-<step>``; ``files`` x ``size`` bytes, with ShardFile rows if ``shards``."""

    class Meta:
        model = CheckpointCopy
        skip_postgeneration_save = True  # the hook writes the files; the copy itself is already saved

    class Params:
        files = 0
        size = 1024

    checkpoint = factory.SubFactory(CheckpointFactory)
    location = factory.SubFactory(StorageLocationFactory)
    path = factory.LazyAttribute(
        lambda o: f"{o.checkpoint.run.team.name}/{o.checkpoint.run.name}/checkpoint-{o.checkpoint.step}"
    )
    format = "hf_trainer"
    state = CopyState.COMPLETE
    file_count = factory.LazyAttribute(lambda o: o.files)
    bytes = factory.LazyAttribute(lambda o: o.files * o.size)

    @factory.post_generation
    def shards(copy: CheckpointCopy, create: bool, extracted: bool | None, **kwargs) -> None:
        """``shards=True``: the copy's ``file_count`` files of equal size, in one insert."""
        if not (create and extracted and copy.file_count):
            return
        size = copy.bytes // copy.file_count
        now = timezone.now()
        ShardFile.objects.bulk_create(
            ShardFileFactory.build(
                location=copy.location,
                copy=copy,
                path=f"{copy.path}/model-{i:05d}.safetensors",
                size=size,
                mtime=now,
                etag=f"etag{i}",
            )
            for i in range(copy.file_count)
        )


class ShardFileFactory(DjangoModelFactory):
    """A present file; of ``copy`` (and at its location) when given one."""

    class Meta:
        model = ShardFile

    copy = None
    location = factory.Maybe(
        "copy",
        yes_declaration=factory.LazyAttribute(lambda o: o.copy.location),
        no_declaration=factory.SubFactory(StorageLocationFactory),
    )
    path = factory.Sequence(lambda n: f"files/file-{n:05d}.bin")
    size = 1024
    mtime = factory.LazyFunction(timezone.now)
    first_seen_at = factory.LazyAttribute(lambda o: o.mtime)
    changed_at = factory.LazyAttribute(lambda o: o.mtime)
