"""The recovery view: the checkpoint to restore, its copies ranked by restore time, commands, fallbacks, protection."""

from __future__ import annotations

import shlex

import pytest
from django.utils import timezone

from actions.models import Hold, Pin
from audit.models import AuditEvent
from catalog.choices import CopyState, Verification
from catalog.models import CopyTierUsage
from catalog.recovery import assumptions
from catalog.recovery_model import recovery_page
from fleet.models import Bucket, StorageLocation
from fleet.restore_assumptions import parse_assumptions
from tests.conftest import queries_for
from tests.helpers.catalog import make_copy, make_location, make_run

pytestmark = pytest.mark.django_db

GIB = 1024**3


def make_bucket(
    name: str, *, tier: str = "object_standard", prefix: str = "ckpts/", endpoint: str = ""
) -> StorageLocation:
    location = StorageLocation.objects.create(
        name=f"s3://{name}/{prefix}", kind="bucket", tier=tier, root_path=f"s3://{name}/{prefix}", region="us-east-1"
    )
    Bucket.objects.create(location=location, bucket_name=name, prefix=prefix, endpoint_url=endpoint)
    return location


def placed(copy, *parts, verified=False):
    """Give ``copy`` its bytes per (tier, storage class) as the usage refresh would, and a verification."""
    total = 0
    for tier, storage_class, size in parts:
        CopyTierUsage.objects.create(
            copy=copy, location=copy.location, tier=tier, storage_class=storage_class, bytes=size, files=1
        )
        total += size
    copy.bytes = total
    copy.verification = Verification.VERIFIED if verified else Verification.UNVERIFIED
    copy.save()
    return copy


@pytest.fixture
def fleet():
    """A run whose step 200 is on a host, in a standard bucket and in Glacier; step 100 only in the bucket."""
    run = make_run("vision", "vit-huge")
    nvme = make_location("gpu-a01")
    standard = make_bucket("ckpt-hot", endpoint="http://minio.internal:9000")
    glacier = make_bucket("ckpt-cold", tier="archive")
    on_host = placed(make_copy(run, 200, nvme), ("nvme", "", 100 * GIB), verified=True)
    in_bucket = placed(make_copy(run, 200, standard), ("object_standard", "STANDARD", 100 * GIB), verified=True)
    archived = placed(make_copy(run, 200, glacier), ("archive", "GLACIER", 100 * GIB), verified=True)
    placed(make_copy(run, 100, standard), ("object_standard", "STANDARD", 90 * GIB), verified=True)
    return run, on_host, in_bucket, archived


def test_copies_are_ranked_by_estimated_restore_time(fleet):
    run, on_host, in_bucket, archived = fleet
    recovery = recovery_page(run)
    assert recovery.checkpoint.step == 200 and recovery.verified
    assert [r.copy.pk for r in recovery.copies] == [on_host.pk, in_bucket.pk, archived.pk]
    table = assumptions()
    host, bucket, glacier = recovery.copies
    assert host.seconds == pytest.approx(100 * 1024 / table["nvme"].mib_per_s)
    assert bucket.seconds == pytest.approx(100 * 1024 / table["object_standard"].mib_per_s)
    # An archived copy waits for the restore before the first byte.
    assert glacier.delay_s == table["archive"].delay_s > 3600
    assert glacier.seconds == pytest.approx(glacier.delay_s + 100 * 1024 / table["archive"].mib_per_s)


def test_restore_commands_name_the_real_host_bucket_endpoint_and_keys(fleet):
    run, on_host, in_bucket, archived = fleet
    by_copy = {r.copy.pk: r for r in recovery_page(run).copies}
    rsync = by_copy[on_host.pk].commands
    assert rsync == [
        "rsync -a --partial --info=progress2 gpu-a01:/mnt/nvme0/checkpoints/vision/vit-huge/checkpoint-200/ "
        "./checkpoint-200/"
    ]
    (cp,) = by_copy[in_bucket.pk].commands
    assert shlex.split(cp) == [
        "aws", "s3", "cp", "--endpoint-url", "http://minio.internal:9000", "--recursive",
        "s3://ckpt-hot/ckpts/vision/vit-huge/checkpoint-200/", "./checkpoint-200/",
    ]  # fmt: skip
    restore, copy_back = by_copy[archived.pk].commands
    assert "restore-object" in restore and "--prefix ckpts/vision/vit-huge/checkpoint-200/" in restore
    assert (
        "--force-glacier-transfer" in copy_back and "s3://ckpt-cold/ckpts/vision/vit-huge/checkpoint-200/" in copy_back
    )


def test_a_hostile_path_is_quoted_in_the_commands():
    run = make_run("vision", "vit")
    location = make_location("gpu-a01")
    copy = make_copy(run, 5, location)
    copy.path = "vision/vit/step 5; rm -rf ~"
    copy.save()
    (command,) = recovery_page(run).copies[0].commands
    assert shlex.split(command)[-2] == "gpu-a01:/mnt/nvme0/checkpoints/vision/vit/step 5; rm -rf ~/"


def test_an_unverified_newest_checkpoint_is_offered_with_a_warning():
    run = make_run()
    nvme = make_location()
    make_copy(run, 100, nvme)
    make_copy(run, 300, nvme, state=CopyState.PARTIAL, reasons=["rank 3 missing"])
    recovery = recovery_page(run)
    assert recovery.checkpoint.step == 100 and not recovery.verified
    assert any("no copy of it is verified" in w for w in recovery.warnings)
    assert any("Newer checkpoints exist (step 300)" in w for w in recovery.warnings)


def test_fallbacks_are_older_restorable_checkpoints_newest_first(fleet):
    run, *_ = fleet
    nvme = StorageLocation.objects.get(name__startswith="gpu-a01")
    make_copy(run, 50, nvme)
    make_copy(run, 150, nvme, state=CopyState.CORRUPT)
    fallbacks = recovery_page(run).fallbacks
    assert [f.checkpoint.step for f in fallbacks] == [100, 50]
    assert fallbacks[0].verified and fallbacks[0].best.copy.location.name.startswith("s3://ckpt-hot")
    assert not fallbacks[1].verified


def test_assumptions_can_be_overridden_and_bad_ones_are_refused(settings):
    settings.RESTORE_ASSUMPTIONS = parse_assumptions({"archive": {"delay_s": 600, "mib_per_s": 50}})
    table = assumptions()
    assert (table["archive"].delay_s, table["archive"].mib_per_s) == (600, 50.0)
    assert "overridden" in table["archive"].basis and table["nvme"].delay_s == 0
    for bad in ({"tape": {}}, {"archive": {"mib_per_s": 0}}, {"archive": {"delay_s": -1}}, {"nvme": {"speed": 1}}, []):
        with pytest.raises(ValueError):
            parse_assumptions(bad)


# --- pages ---------------------------------------------------------------------------------------


def test_search_goes_straight_to_a_single_match_and_lists_several(signed_in):
    one = make_run("vision", "vit-huge")
    make_run("speech", "whisper-a")
    make_run("speech", "whisper-b")
    response = signed_in.get("/recovery/?q=vit")
    assert response.status_code == 302 and response.url == f"/recovery/{one.pk}/"
    listed = signed_in.get("/recovery/?q=whisper").content.decode()
    assert "whisper-a" in listed and "whisper-b" in listed
    assert "No run or team name contains" in signed_in.get("/recovery/?q=nothing-like-it").content.decode()
    assert "autofocus" in signed_in.get("/recovery/").content.decode()


def test_the_page_shows_the_best_copy_its_estimate_and_commands(signed_in, fleet):
    run, *_ = fleet
    page = signed_in.get(f"/recovery/{run.pk}/").content.decode()
    assert "Restore from" in page and "gpu-a01" in page and "rsync -a" in page
    assert "Pin and hold" in page and "Assumptions behind the estimates" in page and "MiB/s" in page


def test_a_run_with_nothing_restorable_says_so(signed_in):
    run = make_run()
    make_copy(run, 100, make_location(), state=CopyState.PARTIAL)
    page = signed_in.get(f"/recovery/{run.pk}/").content.decode()
    assert "Nothing to restore" in page


def test_pin_and_hold_protects_the_checkpoint_with_two_audited_actions(signed_in, fleet):
    run, on_host, *_ = fleet
    checkpoint = on_host.checkpoint
    before = AuditEvent.objects.count()
    response = signed_in.post(
        f"/recovery/{run.pk}/protect/",
        {"checkpoint": checkpoint.pk, "reason": "restoring after node failure", "case_ref": "INC-4211"},
        follow=True,
    )
    assert "is now pinned and held for INC-4211" in response.content.decode()
    assert Pin.objects.get(checkpoint=checkpoint, unpinned_at__isnull=True).reason == "restoring after node failure"
    assert Hold.objects.get(checkpoint=checkpoint, released_at__isnull=True).case_ref == "INC-4211"
    assert set(AuditEvent.objects.order_by("id")[before:].values_list("action", flat=True)) == {
        "checkpoint.pin",
        "hold.place",
    }
    page = signed_in.get(f"/recovery/{run.pk}/").content.decode()
    assert "Held: INC-4211" in page and "Pinned" in page


def test_protecting_without_an_incident_reference_changes_nothing(signed_in, fleet):
    run, on_host, *_ = fleet
    before = AuditEvent.objects.count()
    response = signed_in.post(
        f"/recovery/{run.pk}/protect/",
        {"checkpoint": on_host.checkpoint_id, "reason": "restoring", "case_ref": "  "},
        follow=True,
    )
    assert "Nothing was changed" in response.content.decode()
    assert not Pin.objects.exists() and not Hold.objects.exists()
    assert AuditEvent.objects.filter(action__in=["checkpoint.pin", "hold.place"]).count() == 0
    assert AuditEvent.objects.count() - before <= 0


def test_a_viewer_sees_no_form_and_cannot_protect(signed_in_as, fleet):
    run, on_host, *_ = fleet
    viewer = signed_in_as("viewer")
    page = viewer.get(f"/recovery/{run.pk}/").content.decode()
    assert "need the operator role" in page and "Pin and hold</button>" not in page
    viewer.post(
        f"/recovery/{run.pk}/protect/", {"checkpoint": on_host.checkpoint_id, "reason": "x", "case_ref": "INC-1"}
    )
    assert not Pin.objects.exists() and not Hold.objects.exists()


def test_a_checkpoint_of_another_run_is_not_found(signed_in, fleet):
    run, *_ = fleet
    other = make_run("speech", "whisper")
    stray = make_copy(other, 7, make_location("gpu-b02"))
    response = signed_in.post(
        f"/recovery/{run.pk}/protect/", {"checkpoint": stray.checkpoint_id, "reason": "x", "case_ref": "INC-1"}
    )
    assert response.status_code == 404 and not Hold.objects.exists()


def test_the_query_count_does_not_grow_with_checkpoints_or_copies(signed_in, fleet):
    run, *_ = fleet
    first = queries_for(signed_in, f"/recovery/{run.pk}/")
    nvme = StorageLocation.objects.get(name__startswith="gpu-a01")
    extra = make_bucket("ckpt-extra")
    for step in range(10, 60, 10):
        make_copy(run, step, nvme)
        make_copy(run, step, extra)
    make_copy(run, 200, extra)
    assert queries_for(signed_in, f"/recovery/{run.pk}/") == first


def test_gone_copies_are_not_offered(fleet):
    run, on_host, *_ = fleet
    on_host.gone_at = timezone.now()
    on_host.save()
    assert on_host.pk not in [r.copy.pk for r in recovery_page(run).copies]
