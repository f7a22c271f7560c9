"""Keep the garbage collector out of the way: short full collections in a web process, none during a bulk pass.

A full (generation 2) collection walks every object that survived two collections, and in a Django
process most of those are the modules, URL patterns, templates and model classes loaded at start,
which live as long as the process. Measured on the 10M-file bench fleet (docs/benchmarks.md), the
slowest of 30 requests of a heavy page took 2x its median when a full collection fell inside it.
``settle()`` loads the URL configuration (and with it every view module) and moves everything alive
at that moment into the permanent generation (``gc.freeze``), so later collections walk only what
requests allocate.

``collector_paused()`` all but pauses the cyclic collector for the length of a pass that builds millions of
objects that form no cycles (an inventory's file entries and rows, a listing's objects): with the default
thresholds the collector walked them again and again, a quarter of the ingest's Python time at a million
files (docs/benchmarks.md). Reference counting still frees them as before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def settle() -> None:
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  (imports every view module now rather than on a first request)
    gc.collect()
    gc.freeze()


# Young collections inside ``collector_paused``: one per this many new container objects instead of 700.
PAUSED_THRESHOLD = 200_000


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector all but paused inside the block, and as it was after it.

    Not switched off: a young collection still runs every ``PAUSED_THRESHOLD`` new objects, so garbage
    that does form cycles (a client library's responses, say) is still collected and memory stays
    bounded however long the pass; what goes is the full collection over every surviving object, which
    the default thresholds run again and again while a pass keeps building long-lived objects.
    """
    thresholds = gc.get_threshold()
    gc.set_threshold(PAUSED_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
