"""The documentation site builds with ``mkdocs build --strict`` (what ``make docs`` and CI run), offline, and the
pages it builds load nothing from the network.

--strict turns every warning into a failure: a link to a page or an anchor that is not there, a page of docs/
that the nav leaves out (mkdocs.yml: ``validation``). The build runs into a temporary folder, so the checkout's
var/docs-site/ is left alone, and needs no network: the theme's fonts are off (``font: false``, no Google
fonts) and no plugin fetches anything.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.docs.readme_commands import DOCS, README, ROOT, documents

# Attributes that make a browser fetch what they name when the page loads (a plain link, <a href>, does not).
_LOADS = re.compile(r"<(?:script|img|iframe|source|video|audio|link)\b[^>]*?\s(?:src|href|srcset)=\"([^\"]+)\"", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs-site") / "site"
    env = {
        **{k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")},
        "HOME": str(out.parent),
        "NO_MKDOCS_2_WARNING": "1",
        # No network: a build that tried to fetch something would fail here rather than wait.
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    assert "WARNING" not in done.stderr, done.stderr
    return out


def test_the_site_builds_strictly_with_a_page_for_each_reader(site):
    for page in (
        "index",
        "demo",
        "platform-teams",
        "finance",
        "on-call",
        "operators",
        "retention",
        "agent",
        "api",
        "architecture",
        "contributing",
        "admin/install",
        "admin/buckets",
        "admin/audit",
        "admin/configuration",
        "admin/production",
        "pricing",
        "promotion",
        "verification",
        "wire-format",
        "benchmarks",
    ):
        assert (site / f"{page}.html").is_file(), page
    assert (site / "screenshots" / "recovery-llama3-70b-1440.png").is_file()


def test_every_page_of_docs_is_in_the_nav():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["theme"]["font"] is False, "no Google fonts: the site is read offline"
    assert set(documents()) == {README, *DOCS.rglob("*.md")}
    listed = documents()[1:]
    assert len(listed) == len(set(listed))


def test_the_built_pages_load_nothing_from_the_network(site):
    external = {}
    for html in site.rglob("*.html"):
        text = html.read_text()
        found = [url for url in _LOADS.findall(text) if re.match(r"(?:https?:)?//", url)]
        if found:
            external[str(html.relative_to(site))] = found
        # A mermaid diagram would make the theme fetch mermaid from a CDN: the docs draw in plain text instead.
        assert 'class="mermaid"' not in text, html
    assert external == {}


def test_the_readme_stays_a_five_minute_read_that_links_every_reader_to_their_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 200, "the README is what a newcomer reads in five minutes: move the rest to docs/"
    for page in (
        "demo",
        "platform-teams",
        "finance",
        "on-call",
        "operators",
        "admin/install",
        "agent",
        "api",
        "architecture",
        "contributing",
    ):
        assert f"](docs/{page}.md)" in text, page
    assert "make demo" in text and "make test" in text
