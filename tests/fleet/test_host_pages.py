"""Host and location pages, the file-system space hosts report with their inventories, and the place filters of
the runs list and the API: what lives on gpu-a01, and who may see which of it."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from audit.models import AuditEvent
from catalog.models import Run
from fleet.models import Bucket, Inventory, StorageLocation
from fleet.services import gzip_lines
from tests.conftest import give_roles, queries_for
from tests.helpers.ingest import post
from tests.helpers.usage import dcp

TB = 10**12


@pytest.fixture
def send(client, django_capture_on_commit_callbacks):
    """Upload an inventory of ``files`` with ``header`` fields added, and let its ingestion run; the response."""

    def send(kit, files: list[dict], **header):
        lines = kit.lines(files)
        lines[0].update(header)
        with django_capture_on_commit_callbacks(execute=True):
            return post(client, kit, gzip_lines(lines))

    return send


@pytest.fixture
def fleet(make_host, send):
    """Two GPU hosts: gpu-a01 holds a run of llm and one of vision, gpu-b07 one of nlp; a01 reported its space."""
    a = make_host("gpu-a01", "/mnt/nvme0/checkpoints")
    b = make_host("gpu-b07", "/mnt/nvme0/checkpoints")
    files = dcp("llm", "llama-405b", 100, 4096) + dcp("llm", "llama-405b", 200, 4096) + dcp("vision", "vit-h", 10, 2048)
    size, free = 7_680 * 10**9, 2_150 * 10**9
    assert send(a, files, fs_size_bytes=size, fs_free_bytes=free).status_code == 202
    assert send(b, dcp("nlp", "bert-xl", 5, 1024)).status_code == 202
    return a, b


# --- the space a host reports ----------------------------------------------------------------------------------


def test_the_receive_keeps_the_file_systems_size_and_free_space(fleet):
    a, _b = fleet
    loc = StorageLocation.objects.get(pk=a.location.pk)
    assert (loc.fs_size_bytes, loc.fs_free_bytes) == (7_680 * 10**9, 2_150 * 10**9)
    assert loc.fs_used_bytes == 5_530 * 10**9 and loc.fs_used_percent == 72.0
    assert loc.fs_reported_at is not None
    assert Inventory.objects.get(location=loc).status == "applied"


def test_an_agent_that_reports_no_space_keeps_working_and_nothing_is_made_up(fleet):
    _a, b = fleet
    loc = StorageLocation.objects.get(pk=b.location.pk)
    assert Inventory.objects.get(location=loc).status == "applied"
    assert (loc.fs_size_bytes, loc.fs_free_bytes, loc.fs_reported_at) == (None, None, None)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"fs_size_bytes": 100, "fs_free_bytes": 101}, "is more than fs_size_bytes"),
        ({"fs_size_bytes": -1, "fs_free_bytes": 0}, "whole number of bytes"),
        ({"fs_size_bytes": "7.68 TB", "fs_free_bytes": 0}, "whole number of bytes"),
        ({"fs_size_bytes": 100.5, "fs_free_bytes": 1}, "whole number of bytes"),
        ({"fs_size_bytes": True, "fs_free_bytes": 0}, "whole number of bytes"),
        ({"fs_size_bytes": 2**63, "fs_free_bytes": 0}, "whole number of bytes"),
        ({"fs_size_bytes": 100}, "without fs_free_bytes"),
    ],
)
def test_impossible_space_is_refused_whole_and_changes_nothing(make_host, send, fields, words):
    kit = make_host()
    before = StorageLocation.objects.values().get(pk=kit.location.pk)
    response = send(kit, dcp("llm", "llama-405b", 100, 4096), **fields)
    assert response.status_code == 400, response.content
    assert words in response.json()["detail"]
    assert not Inventory.objects.exists()
    assert StorageLocation.objects.values().get(pk=kit.location.pk) == before


def test_an_older_measurement_does_not_overwrite_a_newer_one(make_host, send):
    kit = make_host()
    assert send(kit, [], allow_empty=True, fs_size_bytes=1000, fs_free_bytes=400).status_code == 202
    old = {"started_at": "2020-01-01T00:00:00Z", "fs_size_bytes": 1000, "fs_free_bytes": 900}
    assert send(kit, [], allow_empty=True, **old).status_code == 202
    assert StorageLocation.objects.get(pk=kit.location.pk).fs_free_bytes == 400


# --- the host page ---------------------------------------------------------------------------------------------


def test_the_host_page_answers_what_lives_on_it(fleet, signed_in):
    a, _b = fleet
    html = signed_in.get(f"/fleet/hosts/{a.host.pk}/").content.decode()
    assert "gpu-a01" in html and "dc1" in html and "eu-west" in html
    assert "not registered" in html and "fleet_host set-gpus gpu-a01" in html  # no GPU count given
    assert "agent" in html.lower() and "<code>tests</code>" in html  # the agent string of its newest inventory
    assert "72.0% used" in html and "6.98 TiB" in html and "1.96 TiB" in html  # 7.68 TB, 2.15 TB free
    assert "llama-405b" in html and "vit-h" in html and "bert-xl" not in html
    assert ">llm</a>" in html and ">vision</a>" in html
    assert f'href="/runs/?host={a.host.pk}"' in html
    assert f'href="/fleet/locations/{a.location.pk}/"' in html
    assert "Mark down" in html


def test_the_host_page_says_so_when_the_agent_does_not_report_space(fleet, signed_in):
    _a, b = fleet
    html = signed_in.get(f"/fleet/hosts/{b.host.pk}/").content.decode()
    assert "Size and free space not reported" in html


def test_a_person_of_one_team_sees_the_host_and_only_their_teams_runs(fleet, signed_in_as, settings):
    settings.CKPTFLEET_TEAM_SCOPING = True
    a, _b = fleet
    client = signed_in_as("viewer")
    give_roles(client.user, "team:vision")
    html = client.get(f"/fleet/hosts/{a.host.pk}/").content.decode()
    assert "vit-h" in html
    assert "llama-405b" not in html and ">llm</a>" not in html
    html = client.get(f"/fleet/locations/{a.location.pk}/").content.decode()
    assert "vit-h" in html and "llama-405b" not in html


def test_a_person_of_a_team_with_nothing_there_sees_nothing_of_other_teams(fleet, signed_in_as, settings):
    settings.CKPTFLEET_TEAM_SCOPING = True
    _a, b = fleet
    client = signed_in_as("viewer")
    give_roles(client.user, "team:speech")
    html = client.get(f"/fleet/hosts/{b.host.pk}/").content.decode()
    assert "bert-xl" not in html and "nlp" not in html
    assert "No checkpoint of your teams' runs lives here" in html


def test_a_viewer_is_offered_no_action_and_cannot_mark_a_host_down(fleet, signed_in_as):
    a, _b = fleet
    viewer = signed_in_as("viewer")
    assert "Mark down" not in viewer.get(f"/fleet/hosts/{a.host.pk}/").content.decode()
    response = viewer.post(f"/fleet/hosts/{a.host.pk}/state/", {"do": "down", "reason": "drive failed"}, follow=True)
    assert "Nothing was changed" in response.content.decode()
    a.host.refresh_from_db()
    assert a.host.down_since is None
    assert not AuditEvent.objects.filter(action="host.down").exists()


def test_an_operator_marks_a_host_down_and_up_from_its_page_audited(fleet, signed_in_as):
    a, _b = fleet
    operator = signed_in_as("operator")
    url = f"/fleet/hosts/{a.host.pk}/state/"
    response = operator.post(url, {"do": "down", "reason": "PSU failed, INC-42"}, follow=True)
    html = response.content.decode()
    assert "is marked down" in html and "PSU failed, INC-42" in html and "Mark up" in html
    a.host.refresh_from_db()
    assert a.host.down_reason == "PSU failed, INC-42"
    assert AuditEvent.objects.filter(action="host.down", target_id=a.host.pk).count() == 1
    assert "say why" in operator.post(url, {"do": "down", "reason": ""}, follow=True).content.decode()
    operator.post(url, {"do": "up", "reason": "PSU replaced"})
    a.host.refresh_from_db()
    assert a.host.down_since is None
    assert AuditEvent.objects.filter(action="host.up", target_id=a.host.pk).count() == 1


def test_an_unknown_host_or_location_is_not_found(signed_in):
    assert signed_in.get("/fleet/hosts/999999/").status_code == 404
    assert signed_in.get("/fleet/locations/999999/").status_code == 404


def test_the_host_page_query_count_does_not_grow_with_runs(make_host, send, signed_in):
    kit = make_host()
    assert send(kit, dcp("llm", "run-0", 1, 1024)).status_code == 202
    one = queries_for(signed_in, f"/fleet/hosts/{kit.host.pk}/")
    files = [f for i in range(12) for f in dcp(f"team-{i % 4}", f"run-{i}", 1, 1024)]
    assert send(kit, files).status_code == 202
    assert queries_for(signed_in, f"/fleet/hosts/{kit.host.pk}/") <= one
    assert queries_for(signed_in, f"/fleet/locations/{kit.location.pk}/") <= one


# --- the location page -----------------------------------------------------------------------------------------


def test_a_hosts_root_has_a_page_that_leads_to_its_host(fleet, signed_in):
    a, _b = fleet
    html = signed_in.get(f"/fleet/locations/{a.location.pk}/").content.decode()
    assert f'href="/fleet/hosts/{a.host.pk}/"' in html
    assert "72.0% used" in html and "llama-405b" in html


def test_a_bucket_page_shows_its_settings_and_its_scan_state(db, signed_in, signed_in_as):
    loc = StorageLocation.objects.create(
        name="ckpt-eu", kind="bucket", tier="object_standard", root_path="s3://ckpt-eu/fleet/", region="eu-west"
    )
    Bucket.objects.create(
        location=loc,
        bucket_name="ckpt-eu",
        prefix="fleet/",
        region_name="eu-west-1",
        versioning="Enabled",
        object_lock=True,
        scan_every_minutes=0,
    )
    html = signed_in.get(f"/fleet/locations/{loc.pk}/").content.decode()
    for words in ("ckpt-eu", "<code>fleet/</code>", "eu-west-1", "Enabled", "Object Lock", "on demand only"):
        assert words in html, words
    assert "Never scanned" in html and "No checkpoint lives here yet" in html
    assert "Scan now" in html
    assert "Scan now" not in signed_in_as("viewer").get(f"/fleet/locations/{loc.pk}/").content.decode()


# --- links that lead to the pages ------------------------------------------------------------------------------


def test_the_fleet_overview_links_hosts_and_locations_to_their_pages(fleet, signed_in):
    a, _b = fleet
    html = signed_in.get("/fleet/").content.decode()
    assert f'href="/fleet/hosts/{a.host.pk}/"' in html
    assert f'href="/fleet/locations/{a.location.pk}/"' in html
    assert "72.0% full" in html


# --- the runs list and the API filtered by place ---------------------------------------------------------------


def test_the_runs_list_filters_by_host_and_location(fleet, signed_in):
    a, b = fleet
    on_a = signed_in.get(f"/runs/?host={a.host.pk}").content.decode()
    assert "llama-405b" in on_a and "vit-h" in on_a and "bert-xl" not in on_a
    assert "host gpu-a01" in on_a  # the chip
    on_b = signed_in.get(f"/runs/?location={b.location.pk}").content.decode()
    assert "bert-xl" in on_b and "llama-405b" not in on_b
    nvme = signed_in.get("/runs/?tier=nvme").content.decode()
    assert "bert-xl" in nvme and "llama-405b" in nvme
    glacier = signed_in.get("/runs/?storage_class=glacier").content.decode()
    assert "llama-405b" not in glacier and "storage class GLACIER" in glacier
    assert "llama-405b" not in signed_in.get("/runs/?bucket=ckpt-eu").content.decode()
    # Nonsense is ignored, not an error page.
    assert signed_in.get("/runs/?host=abc&storage_class=%3Cscript%3E").status_code == 200


def test_the_api_filters_runs_and_checkpoints_by_place(fleet, signed_in):
    a, b = fleet
    runs = signed_in.get(f"/api/v1/runs/?host={a.host.pk}").json()
    assert sorted(r["name"] for r in runs["results"]) == ["llama-405b", "vit-h"]
    checkpoints = signed_in.get(f"/api/v1/checkpoints/?location={b.location.pk}").json()
    rows = checkpoints["results"] if isinstance(checkpoints, dict) else checkpoints
    assert [c["step"] for c in rows] == [5]
    rows = signed_in.get("/api/v1/checkpoints/?storage_class=GLACIER").json()
    assert (rows["results"] if isinstance(rows, dict) else rows) == []


def test_the_locations_api_carries_the_space_a_host_reported(fleet, signed_in):
    a, b = fleet
    rows = {r["id"]: r for r in signed_in.get("/api/v1/locations/").json()["results"]}
    assert (rows[a.location.pk]["fs_size_bytes"], rows[a.location.pk]["fs_free_bytes"]) == (
        7_680 * 10**9,
        2_150 * 10**9,
    )
    assert rows[b.location.pk]["fs_size_bytes"] is None


@pytest.mark.parametrize(
    ("size", "free"), [(None, 5), (5, None), (100, 101), (100, -1)], ids=["no-size", "no-free", "over", "negative"]
)
def test_the_database_refuses_space_that_cannot_be(make_host, size, free):
    kit = make_host()
    with pytest.raises(IntegrityError), transaction.atomic():
        StorageLocation.objects.filter(pk=kit.location.pk).update(fs_size_bytes=size, fs_free_bytes=free)


def test_a_runs_page_narrows_to_the_checkpoints_on_a_host_from_the_host_page(make_host, send, signed_in):
    a = make_host("gpu-a01", "/mnt/nvme0/checkpoints")
    b = make_host("gpu-b07", "/mnt/nvme0/checkpoints")
    assert send(a, dcp("llm", "llama-405b", 100, 4096) + dcp("llm", "llama-405b", 200, 4096)).status_code == 202
    assert send(b, dcp("llm", "llama-405b", 300, 4096)).status_code == 202
    run = Run.objects.get(name="llama-405b")
    host_page = signed_in.get(f"/fleet/hosts/{b.host.pk}/").content.decode()
    assert f'href="/runs/{run.pk}/?host={b.host.pk}#timeline"' in host_page
    html = signed_in.get(f"/runs/{run.pk}/?host={b.host.pk}").content.decode()
    assert "Step 300" in html and "Step 100" not in html and "Step 200" not in html
    assert "host gpu-b07" in html  # the chip that removes it
    everything = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "Step 100" in everything and "Step 300" in everything
    assert "No checkpoint of this run there" in signed_in.get(f"/runs/{run.pk}/?storage_class=GLACIER").content.decode()
