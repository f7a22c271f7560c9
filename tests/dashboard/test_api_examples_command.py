"""``manage.py api_examples``: the committed response examples are what the seeded demo fleet answers."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from ckptfleet.schema import recorded_examples
from tests.conftest import restore_default_prices

pytestmark = pytest.mark.django_db


def test_it_records_every_committed_example_from_the_demo_without_secrets(settings, tmp_path):
    settings.VAR_DIR = tmp_path
    restore_default_prices()
    call_command("seed_demo", dir=str(tmp_path / "demo"), stdout=io.StringIO())
    out = tmp_path / "examples.json"
    call_command("api_examples", write=True, output=str(out), stdout=io.StringIO(), stderr=io.StringIO())
    fresh = json.loads(out.read_text())
    assert set(fresh) == set(recorded_examples()), "regenerate ckptfleet/api_examples.json (docs/api.md, API tokens)"
    text = out.read_text()
    for word in ("cfu_", "cfh_", "X-Amz-Signature", str(tmp_path)):
        assert word not in text, word
    assert all(200 <= found["status"] < 300 and found["body"] for found in fresh.values())
    checkpoints = fresh["checkpoints_list"]["body"]
    assert len(checkpoints["results"]) == 2  # lists are cut to their first two items


def test_without_the_demo_it_says_to_seed_it_first():
    with pytest.raises(CommandError, match="seed_demo"):
        call_command("api_examples", stdout=io.StringIO())
