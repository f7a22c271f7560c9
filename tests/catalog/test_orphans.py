"""Orphans: storage that restores nothing, grouped by location and run directory with bytes and ages."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from catalog import selectors
from catalog.choices import CopyState, RunStatus
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
from catalog.services import PathTemplate
from fleet.models import Bucket, Host, MultipartUpload, StorageLocation
from tests.conftest import queries_for

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def host_location(name: str = "gpu-a01", template: str = "{team}/{run}") -> StorageLocation:
    host, _ = Host.objects.get_or_create(name=name, defaults={"site": "dc1", "region": "eu-west"})
    return StorageLocation.objects.create(
        name=f"{name}:/mnt/nvme0/checkpoints",
        kind="nvme",
        tier="nvme",
        host=host,
        root_path="/mnt/nvme0/checkpoints",
        path_template=template,
    )


def bucket_location(name: str = "s3-ckpt") -> StorageLocation:
    return StorageLocation.objects.create(name=name, kind="bucket", tier="object_standard", region="us-east-1")


def files(location: StorageLocation, paths: dict[str, int], *, copy: CheckpointCopy | None = None, age_days=0):
    when = NOW - timedelta(days=age_days)
    ShardFile.objects.bulk_create(
        ShardFile(location=location, path=p, size=s, mtime=when, copy=copy, first_seen_at=when, changed_at=when)
        for p, s in paths.items()
    )


def a_copy(
    location: StorageLocation,
    *,
    team: str = "llm",
    run: str = "llama-7b",
    step: int = 100,
    state: str = CopyState.COMPLETE,
    temporary: bool = False,
    dirname: str = "",
    size: int = 4096,
    status: str = RunStatus.ACTIVE,
) -> CheckpointCopy:
    team_obj, _ = Team.objects.get_or_create(name=team)
    run_obj, _ = Run.objects.get_or_create(team=team_obj, name=run, defaults={"status": status})
    checkpoint, _ = Checkpoint.objects.get_or_create(run=run_obj, step=step)
    path = f"{team}/{run}/{dirname or f'step-{step}'}"
    copy = CheckpointCopy.objects.create(
        checkpoint=checkpoint,
        location=location,
        path=path,
        format="pytorch_dcp",
        state=state,
        temporary=temporary,
        file_count=2,
        bytes=2 * size,
        newest_mtime=NOW - timedelta(days=2),
    )
    files(location, {f"{path}/__0_0.distcp": size, f"{path}/__1_0.distcp": size}, copy=copy, age_days=2)
    return copy


def by_kind(groups) -> dict[str, list]:
    out: dict[str, list] = {}
    for g in groups:
        out.setdefault(g.kind, []).append(g)
    return out


@pytest.fixture
def fleet_with_orphans():
    nvme = host_location()
    bucket = bucket_location()
    a_copy(nvme, step=100)  # a healthy checkpoint: no orphan
    files(nvme, {"llm/llama-7b/notes.txt": 10, "llm/llama-7b/step-100.bak/x.bin": 30}, age_days=5)
    files(nvme, {"scratch/dump.bin": 1000, "stray.bin": 7})
    a_copy(nvme, step=200, dirname="step-200.tmp", temporary=True, state=CopyState.PARTIAL, size=100)
    a_copy(nvme, team="vision", run="vit-old", step=5, status=RunStatus.DELETED, size=50)
    a_copy(nvme, step=300, state=CopyState.PARTIAL, size=20)
    # Step 400 has one partial and one complete copy: restorable, so not an orphan.
    a_copy(nvme, step=400, state=CopyState.PARTIAL)
    a_copy(host_location("gpu-b01"), step=400)
    MultipartUpload.objects.create(
        location=bucket,
        key="llm/llama-7b/step-500/__0_0.distcp",
        upload_id="u1",
        parts=3,
        bytes=3 * 8 * 1024**2,
        initiated_at=NOW - timedelta(days=9),
        first_seen_at=NOW,
    )
    MultipartUpload.objects.create(
        location=bucket, key="llm/llama-7b/step-500/__1_0.distcp", upload_id="u2", first_seen_at=NOW
    )
    MultipartUpload.objects.create(
        location=bucket, key="llm/llama-7b/old", upload_id="u3", first_seen_at=NOW, gone_at=NOW
    )
    return nvme, bucket


def test_every_kind_of_orphan_is_grouped_by_location_and_run_directory_with_bytes(fleet_with_orphans):
    nvme, bucket = fleet_with_orphans
    kinds = by_kind(selectors.orphans())
    unclaimed = {(g.location_id, g.prefix): (g.items, g.bytes) for g in kinds["unclaimed"]}
    assert unclaimed == {
        (nvme.pk, "llm/llama-7b"): (2, 40),
        (nvme.pk, "scratch"): (1, 1000),
        (nvme.pk, ""): (1, 7),
    }
    (temporary,) = kinds["temporary"]
    assert (temporary.prefix, temporary.items, temporary.files, temporary.bytes) == ("llm/llama-7b", 1, 2, 200)
    (deleted,) = kinds["deleted_run"]
    assert (deleted.prefix, deleted.run_label, deleted.bytes) == ("vision/vit-old", "vision/vit-old", 100)
    (partial,) = kinds["all_partial"]
    assert (partial.prefix, partial.items, partial.bytes, partial.run_label) == ("llm/llama-7b", 1, 40, "llm/llama-7b")
    (uploads,) = kinds["multipart"]
    assert (uploads.location_id, uploads.prefix, uploads.items, uploads.files) == (bucket.pk, "llm/llama-7b", 2, 3)
    assert uploads.bytes == 3 * 8 * 1024**2
    assert uploads.oldest == NOW - timedelta(days=9)


def test_ages_are_the_oldest_and_newest_file_times(fleet_with_orphans):
    groups = {g.prefix: g for g in by_kind(selectors.orphans())["unclaimed"]}
    assert groups["llm/llama-7b"].oldest == groups["llm/llama-7b"].newest == NOW - timedelta(days=5)


def test_orphans_are_filtered_by_kind_and_location(fleet_with_orphans):
    nvme, _ = fleet_with_orphans
    assert {g.kind for g in selectors.orphans(kind="multipart")} == {"multipart"}
    assert {g.location_id for g in selectors.orphans(location_id=nvme.pk)} == {nvme.pk}
    assert selectors.orphans(location_id=999999) == []


def test_a_gone_file_or_a_claimed_one_is_no_orphan(db):
    location = host_location()
    a_copy(location)
    files(location, {"llm/llama-7b/gone.bin": 5})
    ShardFile.objects.filter(path="llm/llama-7b/gone.bin").update(gone_at=NOW)
    assert selectors.orphans() == []


@pytest.mark.parametrize("template", ["{run}", "{team}/{run}", "prod/{team}/{run}", "{any}/{team}/{run}"])
def test_the_run_directory_in_sql_is_the_one_recognition_uses(template):
    location = host_location(template=template)
    paths = [
        "a.bin",
        "t/a.bin",
        "t/r/a.bin",
        "t/r/step-1/a.bin",
        "t/r/step-1/sub/deeper/a.bin",
        "prod/t/r/x/y.bin",
        "ünï/cödé/ß/f.bin",
    ]
    files(location, dict.fromkeys(paths, 1))
    expected: dict[str, int] = {}
    template_obj = PathTemplate.parse(template)
    for path in paths:
        group = template_obj.group_of(path)
        expected[group] = expected.get(group, 0) + 1
    assert {g.prefix: g.items for g in selectors.orphans(kind="unclaimed")} == expected


def test_locations_with_different_templates_group_each_by_its_own(db):
    flat = host_location("gpu-a01", template="{run}")
    deep = host_location("gpu-b01", template="{team}/{run}")
    files(flat, {"r/step-1/x": 1})
    files(deep, {"t/r/step-1/x": 1})
    assert {(g.location_id, g.prefix) for g in selectors.orphans()} == {(flat.pk, "r"), (deep.pk, "t/r")}


def test_an_uploads_key_is_taken_below_its_buckets_prefix(db):
    location = bucket_location()
    Bucket.objects.create(location=location, bucket_name="ckpts", prefix="prod/llm/")
    other = bucket_location("s3-other")
    for loc, key in ((location, "prod/llm/team/run/step-1/x"), (other, "team/run/step-2/y")):
        MultipartUpload.objects.create(location=loc, key=key, upload_id=key, first_seen_at=NOW)
    assert {(g.location_id, g.prefix) for g in selectors.orphans()} == {
        (location.pk, "team/run"),
        (other.pk, "team/run"),
    }


# --- the page and the API -------------------------------------------------------------------------


def test_the_orphans_page_lists_them_with_units(signed_in, fleet_with_orphans):
    html = signed_in.get("/orphans/").content.decode()
    assert "<h1>Orphans</h1>" in html
    assert "<code>llm/llama-7b/</code>" in html
    assert "the location root" in html
    assert "Incomplete multipart uploads" in html
    assert "24.0 MiB" in html  # the upload's parts
    assert "size unknown" not in html
    assert "2 uploads" in html and "3 parts" in html
    assert "1,000 B" not in html and "1000 B" in html
    assert "vision/vit-old" in html
    assert "1 partial copy" in html
    assert 'aria-current="page">Orphans' in html


def test_the_orphans_page_filters_by_kind(signed_in, fleet_with_orphans):
    html = signed_in.get("/orphans/?kind=temporary").content.decode()
    assert "Left-overs of interrupted saves" in html
    assert "scratch/" not in html
    assert "Clear" in html


def test_an_empty_fleet_says_what_orphans_are_and_that_none_were_found(signed_in):
    html = signed_in.get("/orphans/").content.decode()
    assert "No orphans found" in html
    assert "incomplete multipart uploads" in html
    assert "None were found at any location the fleet reports." in html
    assert "0 B" in html


def test_the_api_lists_orphans(signed_in, fleet_with_orphans):
    body = signed_in.get("/api/v1/orphans/").json()
    assert body["count"] == 7
    first = body["results"][0]
    assert set(first) >= {"kind", "location", "prefix", "items", "files", "bytes", "oldest", "newest", "run"}
    uploads = signed_in.get("/api/v1/orphans/?kind=multipart").json()["results"]
    assert [(u["kind"], u["bytes"], u["items"]) for u in uploads] == [("multipart", 3 * 8 * 1024**2, 2)]
    assert signed_in.get("/api/v1/orphans/?kind=nonsense").status_code == 400
    assert signed_in.get("/api/v1/orphans/?location=x").status_code == 400


def test_the_api_refuses_a_stranger(client):
    assert client.get("/api/v1/orphans/").status_code == 401


def test_the_page_sends_a_stranger_to_sign_in(client):
    response = client.get("/orphans/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_orphans_page_query_count_does_not_grow_with_the_data(signed_in, django_assert_max_num_queries):
    nvme = host_location()
    files(nvme, {"llm/llama-7b/notes.txt": 10})
    one = queries_for(signed_in, "/orphans/")
    bucket = bucket_location()
    for i in range(20):
        files(nvme, {f"team{i}/run{i}/stray-{j}.bin": j for j in range(5)})
        a_copy(nvme, run=f"run-{i}", step=i, temporary=True, dirname=f"step-{i}.tmp")
        a_copy(nvme, team="vision", run=f"old-{i}", step=i, status=RunStatus.DELETED)
        a_copy(nvme, run=f"partial-{i}", step=i, state=CopyState.PARTIAL)
        MultipartUpload.objects.create(location=bucket, key=f"k/{i}/x", upload_id=f"u{i}", first_seen_at=NOW)
    host_location("gpu-b01", template="{run}")
    with django_assert_max_num_queries(one):
        assert signed_in.get("/orphans/").status_code == 200
    with django_assert_max_num_queries(one):
        assert signed_in.get("/api/v1/orphans/").status_code == 200
