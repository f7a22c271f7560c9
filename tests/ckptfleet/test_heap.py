"""The garbage collector's handling: all but paused for a bulk pass, and as it was afterwards whatever happens."""

from __future__ import annotations

import gc

import pytest

from ckptfleet.heap import PAUSED_THRESHOLD, collector_paused


@pytest.fixture
def collector_state():
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)


def test_young_collections_are_rare_inside_and_as_before_after(collector_state):
    gc.set_threshold(700, 10, 10)
    with collector_paused():
        assert gc.get_threshold() == (PAUSED_THRESHOLD, 10, 10)
        assert gc.isenabled()  # cycles are still collected: memory stays bounded
    assert gc.get_threshold() == (700, 10, 10)


def test_an_error_inside_still_puts_the_thresholds_back(collector_state):
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_garbage_in_cycles_is_still_collected_inside(collector_state):
    class Node:
        pass

    before = gc.get_count()[0]
    with collector_paused():
        for _ in range(3 * PAUSED_THRESHOLD):
            a, b = Node(), Node()
            a.other, b.other = b, a  # a cycle, garbage at once
        assert gc.get_count()[0] < PAUSED_THRESHOLD + before  # young collections ran and took them


def test_an_ingest_leaves_the_collector_as_it_found_it(collector_state, make_host, client):
    from fleet.models import Inventory
    from ingest.inventory import ingest
    from tests.helpers.ingest import dcp, post

    gc.set_threshold(700, 10, 10)
    kit = make_host()
    response = post(client, kit, kit.body(dcp(100)))
    assert response.status_code == 202  # stored; the task runs at commit, which this test never reaches
    assert ingest(response.json()["id"]).status == "applied"
    assert gc.get_threshold() == (700, 10, 10)
    assert Inventory.objects.get(pk=response.json()["id"]).checkpoints_found == 1
