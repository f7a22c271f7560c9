"""The garbage collector's handling: paused for a bulk pass, and as it was afterwards whatever happens."""

from __future__ import annotations

import gc

import pytest

from ckptfleet.heap import collector_paused


@pytest.fixture
def collector_state():
    enabled = gc.isenabled()
    yield
    gc.enable() if enabled else gc.disable()


def test_the_collector_is_off_inside_and_on_again_after(collector_state):
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_an_error_inside_still_switches_it_back_on(collector_state):
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_state):
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_an_ingest_leaves_the_collector_as_it_found_it(collector_state, make_host, client):
    from fleet.ingest import ingest
    from fleet.models import Inventory
    from tests.fleet.test_ingest import dcp, post

    gc.enable()
    kit = make_host()
    response = post(client, kit, kit.body(dcp(100)))
    assert response.status_code == 202  # stored; the task runs at commit, which this test never reaches
    assert ingest(response.json()["id"]).status == "applied"
    assert gc.isenabled()
    assert Inventory.objects.get(pk=response.json()["id"]).checkpoints_found == 1
