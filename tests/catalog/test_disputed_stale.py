"""Stale verification: a verified copy whose checksums are older than CKPTFLEET_VERIFY_STALE_DAYS is flagged.

Copies are verified through the ingest; the agent's ``checksummed_at`` says when their checksums were taken.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.utils import timezone

from catalog.choices import Verification
from spend import placement
from spend.placement import Flag
from tests.conftest import queries_for
from tests.helpers.disputed import copy_at, dcp

ROOT = Path(__file__).resolve().parents[2]
DAY = 86400


def hashed(files: list[dict], days_ago: float) -> list[dict]:
    at = timezone.now().timestamp() - days_ago * DAY
    return [{**f, "mtime": at - 60, "checksummed_at": at} for f in files]


@pytest.fixture
def verified(make_host, push):
    """Step 100 verified 40 days ago on hosts a and b; step 200 verified 5 days ago."""
    a, b = make_host("gpu-a01"), make_host("gpu-b01")
    for kit in (a, b):
        push(kit, hashed(dcp(100), 40) + hashed(dcp(200), 5))
    return a, b


def test_a_copy_verified_longer_ago_than_the_setting_is_flagged(verified, settings):
    a, _ = verified
    settings.VERIFY_STALE_DAYS = 30
    old, fresh = copy_at(a, 100), copy_at(a, 200)
    assert old.verification == fresh.verification == Verification.VERIFIED
    assert (timezone.now() - old.verified_at).days == 40
    assert list(placement.flagged(Flag.VERIFICATION_STALE).values_list("step", flat=True)) == [100]
    assert placement.flag_label(Flag.VERIFICATION_STALE) == "Not verified for 30 days"
    (line,) = [w for f, _, w in placement.explain([(Flag.VERIFICATION_STALE, old.checkpoint)])]
    assert line.startswith("last verified ") and "and 1 more" in line
    settings.VERIFY_STALE_DAYS = 60
    assert not placement.flagged(Flag.VERIFICATION_STALE).exists()
    settings.VERIFY_STALE_DAYS = 3
    assert placement.flag_counts()[Flag.VERIFICATION_STALE] == 2


def test_the_checkpoint_page_shows_what_decided_and_when_each_copy_was_last_verified(verified, signed_in, settings):
    a, _ = verified
    settings.VERIFY_STALE_DAYS = 30
    page = signed_in.get(f"/checkpoints/{copy_at(a, 100).checkpoint_id}/").content.decode()
    assert "decided by the other copies agree" in page
    assert "40 days ago" in page and "not verified for 30 days" in page
    assert "Not verified for 30 days" in page  # the placement flag
    fresh = signed_in.get(f"/checkpoints/{copy_at(a, 200).checkpoint_id}/").content.decode()
    assert "5 days ago" in fresh and "not verified for 30 days" not in fresh


def test_the_overview_counts_stale_verified_copies_and_lists_them(verified, signed_in, settings):
    a, b = verified
    settings.VERIFY_STALE_DAYS = 30
    body = signed_in.get("/").content.decode()
    assert "Verified copies not verified for 30 days</strong></a>:\n      2 copies" in body
    queue = signed_in.get("/queue/copies/?kind=stale")
    assert {c.pk for c in queue.context["copies"]} == {copy_at(a, 100).pk, copy_at(b, 100).pk}
    assert "(40 days ago)" in queue.content.decode()


def test_the_queues_query_counts_do_not_grow_with_the_copies(verified, signed_in, make_host, push, settings):
    settings.VERIFY_STALE_DAYS = 30
    counts = {kind: queries_for(signed_in, f"/queue/copies/?kind={kind}") for kind in ("stale", "disputed")}
    overview = queries_for(signed_in, "/")
    c = make_host("gpu-c01")
    push(c, hashed(dcp(100) + dcp(300) + dcp(400, run="other"), 50))
    push(make_host("gpu-d01"), dcp(300, **{"__0_0.distcp": "flipped"}))
    assert {kind: queries_for(signed_in, f"/queue/copies/?kind={kind}") for kind in counts} == counts
    assert queries_for(signed_in, "/") == overview


@pytest.mark.parametrize(("raw", "named"), [("soon", "is not an integer"), ("0", "must be at least 1")])
def test_a_bad_stale_days_setting_stops_the_start_naming_it(tmp_path, raw, named):
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    environ.update({"CKPTFLEET_VAR_DIR": str(tmp_path), "CKPTFLEET_DEBUG": "1", "CKPTFLEET_VERIFY_STALE_DAYS": raw})
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "CKPTFLEET_VERIFY_STALE_DAYS" in done.stderr and named in done.stderr
