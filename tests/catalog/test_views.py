"""The catalog pages: runs, a run's checkpoints, a checkpoint's copies and files, and the formatting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import RequestFactory
from django.utils import timezone
from django.views.defaults import server_error

from catalog.choices import CopyState
from catalog.models import Checkpoint, CheckpointCopy, Run, Team
from catalog.templatetags.fleet_format import bytes_iec, count, duration, relative_time, state_badge
from tests.conftest import give_roles, queries_for
from tests.helpers.catalog import make_copy, make_location, make_run

pytestmark = pytest.mark.django_db


# --- signing in ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["/", "/runs/", "/runs/1/", "/checkpoints/1/", "/copies/1/files/"],
)
def test_it_sends_a_stranger_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


def test_the_login_page_has_labelled_fields(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    html = response.content.decode()
    assert '<label for="id_username">Username</label>' in html
    assert '<label for="id_password">Password</label>' in html
    assert 'autocomplete="current-password"' in html


def test_a_user_signs_in_and_out(client, django_user_model):
    give_roles(django_user_model.objects.create_user(username="ada", password="a-long-password-1"), "viewer")
    response = client.post("/accounts/login/", {"username": "ada", "password": "a-long-password-1"})
    assert response.status_code == 302
    page = client.get("/runs/")
    assert page.status_code == 200
    assert b'action="/accounts/logout/"' in page.content
    out = client.post("/accounts/logout/", {"next": "/accounts/login/"})
    assert out.status_code == 302
    assert client.get("/runs/").status_code == 302


def test_a_wrong_password_is_said_plainly(client, django_user_model):
    django_user_model.objects.create_user(username="ada", password="a-long-password-1")
    response = client.post("/accounts/login/", {"username": "ada", "password": "nope"})
    assert response.status_code == 200
    assert b'role="alert"' in response.content


def test_the_nav_shows_admin_to_staff_only(signed_in, admin_client):
    assert b'href="/admin/"' not in signed_in.get("/runs/").content
    html = admin_client.get("/runs/").content.decode()
    assert 'href="/admin/"' in html
    assert 'href="/api/v1/docs/"' in html
    assert '<main id="main"' in html
    assert 'aria-current="page">Runs' in html


# --- runs list ----------------------------------------------------------------------------------


def test_an_empty_fleet_tells_a_newcomer_what_to_do(signed_in):
    html = signed_in.get("/").content.decode()
    assert "ckptfleet-agent --server http://testserver" in html
    assert "--root /mnt/nvme0/checkpoints" in html
    assert "python manage.py fleet_host add gpu-a01" in html
    assert "make demo" in html


def test_the_runs_list_shows_counts_bytes_and_what_needs_attention(signed_in):
    loc = make_location()
    other = make_location("gpu-a02")
    run = make_run()
    make_copy(run, 100, loc, files=2, size=1536)
    make_copy(run, 200, loc, state=CopyState.PARTIAL, reasons=["2 of 4 shards are missing"], files=2, size=1536)
    make_copy(run, 200, other, files=2, size=1536)
    html = signed_in.get("/runs/").content.decode()
    assert "vit-huge" in html and "vision" in html
    assert "2 checkpoints" in html
    assert "3 copies" in html
    assert "9.0 KiB" in html  # 3 copies x 2 files x 1.5 KiB
    assert "step 200" in html
    assert "1 copy" in html  # needs attention


def test_the_runs_list_searches_by_run_or_team_and_filters_by_team(signed_in):
    vision = make_run("vision", "vit-huge")
    make_run("speech", "whisper-xl")
    assert "whisper-xl" not in signed_in.get("/runs/?q=vit").content.decode()
    by_team_name = signed_in.get("/runs/?q=speech").content.decode()
    assert "whisper-xl" in by_team_name and "vit-huge" not in by_team_name
    by_team = signed_in.get(f"/runs/?team={vision.team_id}").content.decode()
    assert "vit-huge" in by_team and "whisper-xl" not in by_team
    nothing = signed_in.get("/runs/?q=zzz").content.decode()
    assert "No runs match" in nothing
    assert "ckptfleet-agent" not in nothing
    assert signed_in.get("/runs/?team=not-a-number").status_code == 200


def test_the_runs_list_is_sorted_by_team_then_run_and_paginated(signed_in):
    team = Team.objects.create(name="nlp")
    Run.objects.bulk_create(Run(team=team, name=f"run-{i:03d}") for i in range(55))
    Run.objects.create(team=Team.objects.create(name="audio"), name="zzz")
    first = signed_in.get("/runs/").content.decode()
    assert first.index("zzz") < first.index("run-000")
    assert "run-048" in first and "run-049" not in first
    assert "Page 1 of 2" in first and "56 runs" in first
    second = signed_in.get("/runs/?page=2").content.decode()
    assert "run-049" in second and "run-054" in second


def test_the_runs_list_query_count_does_not_grow_with_runs(signed_in, django_assert_max_num_queries):
    make_copy(make_run("t0", "r0"), 1, make_location("h0"))
    one = queries_for(signed_in, "/runs/")
    for i in range(1, 12):
        make_copy(make_run(f"t{i}", f"r{i}"), i, make_location(f"h{i}"), state=CopyState.CORRUPT)
    with django_assert_max_num_queries(one):
        assert signed_in.get("/runs/").status_code == 200


# --- run page -----------------------------------------------------------------------------------


def test_the_run_page_lists_checkpoints_newest_first_with_the_reasons(signed_in):
    loc = make_location()
    run = make_run()
    make_copy(run, 100, loc)
    bad = make_copy(
        run,
        300,
        loc,
        state=CopyState.CORRUPT,
        reasons=["rank 3 shard is 0 B but the manifest says 1.0 GiB", "header of shard 7 is not safetensors"],
    )
    make_copy(run, 200, loc, state=CopyState.PARTIAL, reasons=["missing model-00002-of-00004.safetensors"])
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert html.index("Step 300") < html.index("Step 200") < html.index("Step 100")
    assert "rank 3 shard is 0 B but the manifest says 1.0 GiB" in html
    assert "header of shard 7 is not safetensors" in html
    assert "missing model-00002-of-00004.safetensors" in html
    assert "Newest restorable checkpoint" in html
    assert f'href="/checkpoints/{bad.checkpoint_id}/"' in html
    assert f'href="/fleet/locations/{loc.pk}/"' in html
    assert "Corrupt" in html and "Partial" in html and "Complete" in html
    assert "3.0 KiB" in html and "2 files" in html


def test_a_checkpoint_saved_without_a_step_is_shown_by_its_tag(signed_in):
    run = make_run()
    loc = make_location()
    make_copy(run, 100, loc)
    final = Checkpoint.objects.create(run=run, step=None, tag="final")
    CheckpointCopy.objects.create(
        checkpoint=final,
        location=loc,
        path="vision/vit-huge/final",
        format="hf_safetensors",
        state=CopyState.COMPLETE,
        file_count=1,
        bytes=10,
    )
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert f'href="/checkpoints/{final.pk}/">final</a>' in html
    page = signed_in.get(f"/checkpoints/{final.pk}/").content.decode()
    assert "<h1>final" in page
    assert "Saved as" in page


def test_the_run_page_warns_when_no_checkpoint_is_complete(signed_in):
    run = make_run()
    make_copy(run, 5, make_location(), state=CopyState.PARTIAL, reasons=["no .metadata file"])
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "No complete checkpoint" in html
    assert "no .metadata file" in html


def test_the_run_page_of_a_run_without_copies_says_so(signed_in):
    run = make_run()
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "No checkpoints present" in html


def test_the_run_page_query_count_does_not_grow_with_checkpoints(signed_in, django_assert_max_num_queries):
    run = make_run()
    locs = [make_location(f"gpu-{i}") for i in range(3)]
    make_copy(run, 0, locs[0])
    make_copy(run, 0, locs[1], state=CopyState.PARTIAL, reasons=["x"])
    one = queries_for(signed_in, f"/runs/{run.pk}/")
    for step in range(1, 15):
        for loc in locs:
            make_copy(run, step, loc)
    with django_assert_max_num_queries(one):
        assert signed_in.get(f"/runs/{run.pk}/").status_code == 200


def test_a_missing_run_gets_a_friendly_404(signed_in):
    response = signed_in.get("/runs/999999/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "There is nothing at this address" in html
    assert "Traceback" not in html


# --- checkpoint page ----------------------------------------------------------------------------


def test_the_checkpoint_page_shows_each_copy_expected_against_actual(signed_in):
    run = make_run()
    good = make_copy(run, 500, make_location("gpu-a01"), files=4, size=2048, expected_files=4, expected_bytes=8192)
    make_copy(
        run,
        500,
        make_location("gpu-a02"),
        state=CopyState.PARTIAL,
        files=3,
        size=2048,
        expected_files=4,
        expected_bytes=8192,
        reasons=["model-00003.safetensors is missing"],
    )
    html = signed_in.get(f"/checkpoints/{good.checkpoint_id}/").content.decode()
    assert "Step 500" in html
    assert f'href="/runs/{run.pk}/"' in html
    assert "Why it is partial" in html
    assert "model-00003.safetensors is missing" in html
    assert "of 4 expected" in html
    assert "1 file missing" in html
    assert "2.0 KiB short" in html
    assert "vision/<wbr>vit-huge/<wbr>checkpoint-500/<wbr>model-00000.safetensors" in html  # wraps at its slashes
    assert "Routine" in html


def test_the_checkpoint_page_limits_files_and_counts_the_rest(signed_in):
    copy = make_copy(make_run(), 7, make_location(), files=205, size=10)
    html = signed_in.get(f"/checkpoints/{copy.checkpoint_id}/").content.decode()
    assert "model-00049.safetensors" in html  # the first 50 (dashboard.views.FILES_SHOWN)
    assert "model-00050.safetensors" not in html
    assert "and 155 more files" in html
    assert f'href="/copies/{copy.pk}/files/"' in html
    files = signed_in.get(f"/copies/{copy.pk}/files/?page=2").content.decode()
    assert "model-00204.safetensors" in files and "model-00199.safetensors" not in files


def test_the_checkpoint_page_lists_copies_that_have_gone(signed_in):
    run = make_run()
    here = make_copy(run, 9, make_location("gpu-a01"))
    gone = make_copy(run, 9, make_location("gpu-a02"))
    CheckpointCopy.objects.filter(pk=gone.pk).update(gone_at=timezone.now(), file_count=0, bytes=0)
    html = signed_in.get(f"/checkpoints/{here.checkpoint_id}/").content.decode()
    assert "Copies that have gone" in html
    assert "1 copy" in html


def test_the_checkpoint_page_query_count_does_not_grow_with_copies(signed_in, django_assert_max_num_queries):
    run = make_run()
    first = make_copy(run, 1, make_location("gpu-0"))
    one = queries_for(signed_in, f"/checkpoints/{first.checkpoint_id}/")
    for i in range(1, 8):
        make_copy(run, 1, make_location(f"gpu-{i}"), files=30, state=CopyState.CORRUPT, reasons=["bad"])
    with django_assert_max_num_queries(one):
        assert signed_in.get(f"/checkpoints/{first.checkpoint_id}/").status_code == 200


def test_a_missing_checkpoint_gets_a_friendly_404(signed_in):
    assert signed_in.get("/checkpoints/424242/").status_code == 404
    assert signed_in.get("/copies/424242/files/").status_code == 404


def test_a_server_error_page_shows_no_traceback():
    response = server_error(RequestFactory().get("/runs/"))
    html = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong on our side" in html
    assert "Traceback" not in html


# --- formatting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0 B"),
        (1, "1 B"),
        (1023, "1023 B"),
        (1536, "1.5 KiB"),
        (1024**2 - 1, "1.0 MiB"),
        (int(12.3 * 1024**3), "12.3 GiB"),
        (4 * 1024**4, "4.00 TiB"),
        (3 * 1024**5 // 2, "1.50 PiB"),
        (None, "—"),
    ],
)
def test_bytes_are_shown_in_binary_units_with_the_unit(value, text):
    assert bytes_iec(value) == text


def test_counts_have_thousands_separators_and_a_noun():
    assert count(1234567) == "1,234,567"
    assert count(1, "file") == "1 file"
    assert count(16384, "file") == "16,384 files"
    assert count(2, "copy,copies") == "2 copies"
    assert count(None) == "—"


def test_relative_times_carry_the_absolute_utc_time():
    moment = timezone.now() - timedelta(minutes=3, seconds=5)
    html = str(relative_time(moment))
    assert ">3 min ago</time>" in html
    assert f'datetime="{moment.astimezone(UTC).isoformat().replace("+00:00", "Z")}"' in html
    assert 'title="' in html and ' UTC"' in html
    assert "never" in str(relative_time(None))
    old = datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert ">2020-01-02</time>" in str(relative_time(old))
    assert "in 2 h" in str(relative_time(timezone.now() + timedelta(hours=2, minutes=1)))


def test_state_badges_use_words_and_a_symbol_not_colour_alone():
    for state, word in [("complete", "Complete"), ("partial", "Partial"), ("corrupt", "Corrupt")]:
        html = str(state_badge(state))
        assert word in html
        assert 'aria-hidden="true"' in html
        assert "badge--" in html
    assert "badge--bad" in str(state_badge("corrupt"))


def test_durations_have_units():
    assert duration(0.42) == "0.4 s"
    assert duration(42) == "42 s"
    assert duration(184) == "3 min 4 s"
    assert duration(2 * 3600 + 300) == "2 h 5 min"
    assert duration(None) == "—"
