"""The demo fleet: real layouts on several hosts, broken the way real saves break, and idempotent."""

from __future__ import annotations

from datetime import timedelta

from django.core.management import call_command
from django.db.models import Max, Min, Sum

from catalog.models import CheckpointCopy, Run, ShardFile
from dashboard.problems import Filters, Kind, problem_page
from fleet.choices import InventoryStatus
from fleet.models import Host, Inventory, StorageLocation
from spend.models import UsageDaily, UsageMonthly
from spend.usage import money


def states() -> dict[tuple[str, str], tuple[str, bool]]:
    rows = CheckpointCopy.objects.filter(gone_at__isnull=True).select_related("location")
    return {(c.location.name, c.path): (c.state, c.temporary) for c in rows}


def test_the_demo_has_hosts_runs_and_broken_checkpoints(db, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", dir=str(tmp_path / "demo"))
    assert Host.objects.count() == 5
    assert Inventory.objects.filter(status=InventoryStatus.APPLIED).count() == 5
    assert {r.team.name for r in Run.objects.select_related("team")} == {"llm", "vision", "nlp", "speech"}
    found = states()
    assert found[("gpu-a01:nvme0", "llm/llama-tiny/step-300")] == ("partial", False)
    assert found[("gpu-a01:nvme0", "llm/llama-tiny/step-400")] == ("partial", True)
    assert found[("lustre-gw1:lustre", "nlp/gpt2-tiny/checkpoint-100")] == ("corrupt", False)
    assert found[("lustre-gw1:lustre", "speech/ds-tiny/global_step200")] == ("partial", False)
    assert found[("lustre-gw1:lustre", "llm/gpt-megatron/iter_0000200")] == ("corrupt", False)
    # The problems list has something of every kind to show, but an ownership conflict (a protected copy whose files
    # now name another checkpoint: tests/reliability/test_protection_follows_data.py makes one).
    # Every demo host is up: no run loses its newest checkpoint to a down one (test_demo_host_down.py marks one).
    # No demo deletion has ended, so none has a proof of reclaim, failed or not (tests/actions/test_reclaim.py).
    assert {t.kind for t in problem_page(Filters(), None).totals if t.count} == set(Kind.values) - {
        Kind.CONFLICT,
        Kind.HOST_DOWN,
        Kind.RECLAIM,
    }
    formats = set(CheckpointCopy.objects.values_list("format", flat=True))
    assert {"pytorch_dcp", "hf_safetensors", "hf_trainer", "deepspeed", "megatron", "orbax", "single_file"} <= formats
    assert (tmp_path / "demo-password").exists()
    # Every root reports its file system as an agent would, at a real size and fill, never less than it holds.
    for loc in StorageLocation.objects.filter(host__isnull=False).select_related("last_inventory"):
        assert (loc.fs_size_bytes and loc.fs_size_bytes % 7_680_000_000_000 == 0) or loc.kind == "pfs", loc
        assert 60 <= loc.fs_used_percent <= 90, (loc, loc.fs_used_percent)
        assert loc.fs_used_bytes >= loc.last_inventory.bytes_total

    call_command("seed_demo", dir=str(tmp_path / "demo"))
    again = Inventory.objects.order_by("-id")[:5]
    assert all((i.files_added, i.files_changed, i.files_gone) == (0, 0, 0) for i in again)
    assert states() == found


def test_the_demo_with_an_s3_endpoint_holds_bucket_copies_of_the_same_runs_good_and_bad(
    db, tmp_path, settings, s3, django_capture_on_commit_callbacks
):
    from io import StringIO

    from catalog import selectors
    from catalog.models import Checkpoint, ShardFile
    from fleet.models import Bucket, MultipartUpload
    from tests.s3 import _reset

    settings.VAR_DIR = tmp_path
    settings.S3_SECRETS_DIR = tmp_path / "s3-secrets"
    out = StringIO()

    def seed(stdout) -> None:
        # A scan's checksum phase is queued once its snapshot commits (HEAD chunks, a task each): run it too.
        with django_capture_on_commit_callbacks(execute=True):
            call_command("seed_demo", dir=str(tmp_path / "demo"), s3_endpoint=s3.url, stdout=stdout)

    seed(out)

    buckets = {b.bucket_name: b for b in Bucket.objects.select_related("location")}
    assert set(buckets) == {"ckpt-demo-eu", "ckpt-demo-us", "ckpt-prod-us"}
    eu, us = buckets["ckpt-demo-eu"].location, buckets["ckpt-demo-us"].location
    assert (eu.failure_region, us.failure_region) == ("eu-west-1", "us-east-1")
    assert buckets["ckpt-demo-eu"].credentials == "file:demo-s3"  # a reference; the keys are in a file
    assert (tmp_path / "s3-secrets" / "demo-s3").stat().st_mode & 0o077 == 0
    scans = Inventory.objects.filter(location__in=[eu, us])
    assert [s.status for s in scans] == [InventoryStatus.APPLIED] * 2
    assert "s3:ckpt-demo-eu (s3://ckpt-demo-eu/fleet/" in out.getvalue()

    # The bucket copies belong to the runs the hosts reported: one run per {team}/{run}, wherever it lives.
    copies = CheckpointCopy.objects.filter(gone_at__isnull=True).select_related("checkpoint__run__team", "location")
    on_hosts = {(c.checkpoint.run.team.name, c.checkpoint.run.name) for c in copies if c.location.host_id}
    in_buckets = {(c.checkpoint.run.team.name, c.checkpoint.run.name) for c in copies if not c.location.host_id}
    assert in_buckets and in_buckets <= on_hosts
    assert {r.team.name for r in Run.objects.select_related("team")} == {"llm", "vision", "nlp", "speech"}

    # Copies that agree are verified across failure domains; the one with a flipped byte disagrees.
    step200 = Checkpoint.objects.get(run__name="llama-tiny", step=200)
    summary = selectors.verification_summary([step200.pk])[step200.pk]
    assert summary.domains == ("host gpu-a01", "host gpu-a02", "region eu-west-1")
    found = {
        (c.location.name, c.path): (c.state, c.verification, c.temporary)
        for c in CheckpointCopy.objects.filter(gone_at__isnull=True).select_related("location")
    }
    # The two host copies agree against the bucket's: the majority says the bucket copy is wrong. Nothing records
    # that the bucket copy was made from a host's (the demo uploads it itself), so its time of writing says nothing.
    assert found[("s3:ckpt-demo-eu", "llm/llama-tiny/step-100")] == ("corrupt", "mismatch", False)
    settled = CheckpointCopy.objects.get(location__name="s3:ckpt-demo-eu", path="llm/llama-tiny/step-100")
    assert settled.verification_basis == "majority"
    # Two host copies of gpt2-tiny's export, one with a flipped bit, and nothing to tell which: disputed.
    for host in ("gpu-b07:nvme0", "lustre-gw1:lustre"):
        assert found[(host, "nlp/gpt2-tiny")] == ("complete", "disputed", False)
    # The bucket uploaded with boto3's default CRC32 is verified against the hosts' CRC32s.
    assert found[("s3:ckpt-demo-us", "vision/vit-jax/500")] == ("complete", "verified", False)
    assert found[("gpu-a01:nvme0", "llm/llama-tiny/step-100")] == ("complete", "verified", False)
    assert found[("s3:ckpt-demo-us", "nlp/gpt2-tiny/checkpoint-100")] == ("complete", "verified", False)
    assert found[("s3:ckpt-demo-eu", "llm/llama-tiny/step-500")][2] is True  # an interrupted save's left-overs
    assert found[("s3:ckpt-demo-us", "vision/vit-jax/600.orbax-checkpoint-tmp-1763700000")][2] is True

    # The production bucket, scanned from its S3 Inventory report: terabytes in three classes, no HEAD needed.
    prod = buckets["ckpt-prod-us"]
    assert prod.inventory_report_uri == "s3://ckpt-prod-inventory/ckpt-prod-us/daily/" and not prod.fetch_checksums
    classes = dict(
        ShardFile.objects.filter(location=prod.location, gone_at__isnull=True)
        .values_list("storage_class")
        .annotate(total=Sum("size"))
    )
    assert set(classes) == {"STANDARD", "GLACIER_IR", "DEEP_ARCHIVE"}
    assert all(total > 10**12 for total in classes.values()), classes
    assert found[("s3:ckpt-prod-us", "llm/llama3-70b/step-40000")] == ("complete", "unverified", False)

    # Archive classes, files of no checkpoint and an upload never completed.
    archived = set(
        ShardFile.objects.filter(location=us, gone_at__isnull=True).values_list("storage_class", "tier").distinct()
    )
    assert {("DEEP_ARCHIVE", "deep_archive"), ("GLACIER", "archive"), ("GLACIER_IR", "archive_instant")} <= archived
    orphans = selectors.orphans(kind="unclaimed", location_id=eu.pk)
    assert [(g.prefix, g.items, g.bytes) for g in orphans] == [("scratch/llama-export-2025-10", 3, 6 * 2**20)]
    upload = MultipartUpload.objects.get(location=eu, gone_at__isnull=True)
    assert (upload.key, upload.parts, upload.bytes) == ("fleet/llm/llama-tiny/step-600/__0_0.distcp", 1, 2 * 2**20)

    # Again on the same endpoint: nothing is written, nothing changes.
    before = states()
    last = Inventory.objects.order_by("-pk").values_list("pk", flat=True).first()
    seed(StringIO())
    again = Inventory.objects.filter(pk__gt=last)
    assert again.count() == 8  # five hosts, three buckets
    # Nothing changes, but for the file the demo's offload uploaded into its target bucket after the first scan
    # (the product moved it there: the scan finds it once, and a third seeding finds nothing new).
    from promotion.models import PromotionItem, PromotionJob

    uploaded = PromotionItem.objects.filter(job__direction="offload", state="done")
    offload_targets = set(uploaded.values_list("job__target_location_id", flat=True))
    assert sum(i.files_added for i in again if i.location_id in offload_targets) == uploaded.count() == 1
    assert all(
        (i.files_added, i.files_changed, i.files_gone) == (0, 0, 0)
        for i in again
        if i.location_id not in offload_targets
    ), list(again.values())
    before = states()
    last = Inventory.objects.order_by("-pk").values_list("pk", flat=True).first()
    seed(StringIO())
    third = Inventory.objects.filter(pk__gt=last)
    assert all((i.files_added, i.files_changed, i.files_gone) == (0, 0, 0) for i in third), list(third.values())
    assert states() == before

    # Again on an endpoint that forgot everything (moto restarted): filled again, the same catalog.
    _reset(s3.url)
    seed(StringIO())
    # ... but for what the offload had uploaded, which the demo does not write again: that copy is gone now.
    jobs = PromotionJob.objects.filter(direction="offload")
    offloaded = {
        (c.location.name, c.path)
        for c in CheckpointCopy.objects.filter(
            location_id__in=offload_targets, checkpoint_id__in=jobs.values("checkpoint_id")
        ).select_related("location")
    }
    assert len(offloaded) == 1
    assert {k: v for k, v in states().items() if k not in offloaded} == {
        k: v for k, v in before.items() if k not in offloaded
    }
    assert MultipartUpload.objects.filter(location=eu, gone_at__isnull=True).count() == 1
    assert MultipartUpload.objects.filter(location=eu, gone_at__isnull=False).count() == 1


def test_the_demo_has_production_sized_runs_on_sparse_files_and_weeks_of_estimated_history(db, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", dir=str(tmp_path / "demo"))
    big = CheckpointCopy.objects.filter(location__name="gpu-c12:nvme0", gone_at__isnull=True)
    # Complete by their real manifests, unverified (walked without content checksums).
    assert {(c.state, c.verification) for c in big} == {("complete", "unverified")}
    assert big.count() == 21
    step = big.get(path="llm/llama3-70b/step-41000")
    stored = ShardFile.objects.filter(copy=step).aggregate(total=Sum("size"))["total"]
    assert 560e9 < stored < 840e9  # a 70B checkpoint with its optimizer state (docs: 560-840 GB)
    # Sparse: the 10+ TB the host reports take (almost) no disk.
    root = tmp_path / "demo" / "gpu-c12" / "nvme0"
    on_disk = sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())
    assert on_disk < 50 * 2**20
    # Usage before the first inventory is estimated from the files' times, weeks back, and priced.
    today = UsageDaily.objects.filter(estimated=False).aggregate(day=Max("day"))["day"]
    estimated = UsageDaily.objects.filter(estimated=True)
    assert estimated.aggregate(day=Min("day"))["day"] <= today - timedelta(days=45)
    last_month = (today.replace(day=1) - timedelta(days=1)).replace(day=1)
    spent = UsageMonthly.objects.filter(month=last_month).aggregate(total=Sum("cost_nanos"))["total"]
    assert money(spent) > 50  # USD: last month reads as money, not 0.00
    assert not estimated.filter(day__gte=today).exists()
