"""Keep the garbage collector out of the way: short full collections in a web process, none during a bulk pass.

A full (generation 2) collection walks every object that survived two collections, and in a Django
process most of those are the modules, URL patterns, templates and model classes loaded at start,
which live as long as the process. Measured on the 10M-file bench fleet (docs/benchmarks.md), the
slowest of 30 requests of a heavy page took 2x its median when a full collection fell inside it.
``settle()`` loads the URL configuration (and with it every view module) and moves everything alive
at that moment into the permanent generation (``gc.freeze``), so later collections walk only what
requests allocate.

``collector_paused()`` switches the cyclic collector off for the length of a pass that builds millions of
short-lived objects that form no cycles (an inventory's file entries and rows): every few hundred
allocations the collector would walk all the young ones for nothing, a quarter of the ingest's Python
time at a million files (docs/benchmarks.md). Reference counting still frees them as before.
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


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block (as it was after it); for one task at a time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
