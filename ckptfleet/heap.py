"""Keep the garbage collector's full collections short in a web process.

A full (generation 2) collection walks every object that survived two collections, and in a Django
process most of those are the modules, URL patterns, templates and model classes loaded at start,
which live as long as the process. Measured on the 10M-file bench fleet (docs/benchmarks.md), the
slowest of 30 requests of a heavy page took 2x its median when a full collection fell inside it.
``settle()`` loads the URL configuration (and with it every view module) and moves everything alive
at that moment into the permanent generation (``gc.freeze``), so later collections walk only what
requests allocate.
"""

from __future__ import annotations

import gc


def settle() -> None:
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018  (imports every view module now rather than on a first request)
    gc.collect()
    gc.freeze()
