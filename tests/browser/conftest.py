"""The browser tests' fixtures: one Chromium per module, the seeded demo on the live server, and its people.

``browser_page`` (one page of a browser of its own) is in tests/conftest.py: tests of other apps use it too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.visitor import Visitor, artefact_dir, launch_chromium
from tests.conftest import skip_unless_this_browser_pass
from tests.helpers.browser import Demo
from tests.helpers.demo_seed import seed_demo


@pytest.fixture(scope="module")
def chromium(request):
    """One Chromium for the whole module; each person gets a fresh context of it."""
    skip_unless_this_browser_pass(request.node.nodeid)
    playwright, browser = launch_chromium()
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture
def demo(live_server, settings, tmp_path_factory) -> Demo:
    """The demo fleet on the live server (seeded once per worker, tests/helpers/demo_seed.py)."""
    trees = seed_demo(settings, tmp_path_factory.getbasetemp())
    password = (Path(settings.VAR_DIR) / "demo-password").read_text().strip()
    return Demo(url=live_server.url, password=password, trees=trees)


@pytest.fixture
def person(chromium, live_server, request, tmp_path_factory):
    """``person("demo-operator")``: a browser context of its own, signed out; closed after the test.

    The password is the demo's (the ``demo`` fixture) unless given.
    """
    shots = artefact_dir(tmp_path_factory)
    prefix = "-".join(request.node.name.removeprefix("test_").split("_")[:4])
    made: list[Visitor] = []

    def make(username: str, password: str = "") -> Visitor:
        visitor = Visitor(
            chromium, live_server.url, username, password or request.getfixturevalue("demo").password, shots, prefix
        )
        made.append(visitor)
        return visitor

    yield make
    for visitor in made:
        visitor.close()
