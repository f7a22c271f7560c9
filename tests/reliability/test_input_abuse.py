"""The reliability scorecard, input abuse at the inventory endpoint (issue 15, item 7).

Hostile paths, malformed and deeply nested lines, NUL characters and oversized bodies have their own tests
(tests/fleet/test_ingest.py, tests/ckptfleet/); here the sizes: a gzip bomb (a few hundred KiB that
expand to hundreds of MiB in one line), integers far beyond 64 bits, a very long inventory, and a host's
token reporting for another host. Each is uploaded through the API and ingested as the worker would, with
the Python heap traced: it fails or succeeds in bounded memory and a clear state, and a refusal applies
nothing. Prints the figures (lines, MiB expanded, peak MiB traced). RELIABILITY_LONG=1: a million lines.
"""

from __future__ import annotations

import gzip
import json
import time
import tracemalloc
import zlib

import pytest

from catalog.models import ShardFile
from fleet.choices import InventoryStatus
from fleet.models import Inventory
from tests.reliability.conftest import report, scale

pytestmark = pytest.mark.django_db

PEAK_LIMIT = 256 * 1024**2  # what one ingest may hold in Python objects at once, whatever its size


def upload(client, kit, body: bytes, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return client.post(
            "/api/v1/inventories/",
            data=body,
            content_type="application/x-ndjson",
            HTTP_CONTENT_ENCODING="gzip",
            **kit.auth(),
        )


def traced(call):
    tracemalloc.start()
    try:
        started = time.monotonic()
        result = call()
        return result, tracemalloc.get_traced_memory()[1], time.monotonic() - started
    finally:
        tracemalloc.stop()


def header(kit) -> bytes:
    return json.dumps(kit.lines([])[0]).encode() + b"\n"


def test_a_gzip_bomb_line_is_refused_in_bounded_memory(make_host, client, django_capture_on_commit_callbacks):
    kit = make_host()
    expanded = scale(256, 1024) * 1024**2
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    body = squeeze.compress(header(kit) + b'{"type": "file", "path": "a", "x": "')
    zeros = b"0" * 1024**2
    for _ in range(expanded // len(zeros)):
        body += squeeze.compress(zeros)
    body += squeeze.flush()
    response, peak, seconds = traced(lambda: upload(client, kit, body, django_capture_on_commit_callbacks))
    assert response.status_code == 202, response.content
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED and inventory.error_line == 2, inventory.error
    assert "longer than" in inventory.error or "line 2" in inventory.error
    assert ShardFile.objects.count() == 0
    assert peak < PEAK_LIMIT, peak
    report(
        "gzip bomb",
        f"{len(body) / 1024:.0f} KiB expanding to {expanded / 1024**2:.0f} MiB in one line: refused at line 2 in "
        f"{seconds:.1f} s, peak {peak / 1024**2:.1f} MiB traced",
    )


@pytest.mark.parametrize("size", [2**64, 10**30, -1, 1e308])
def test_an_integer_beyond_any_column_is_a_bad_line(make_host, client, django_capture_on_commit_callbacks, size):
    kit = make_host()
    files = [{"path": "llm/run/step-1/a.bin", "size": size, "mtime": 1763700000.0}]
    response = upload(client, kit, kit.body(files), django_capture_on_commit_callbacks)
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.FAILED and inventory.error_line == 2, inventory.error
    assert ShardFile.objects.count() == 0


def test_another_hosts_header_is_refused_and_nothing_is_stored(make_host, client, django_capture_on_commit_callbacks):
    mine, other = make_host("gpu-a01"), make_host("gpu-b01", root="/mnt/nvme1/checkpoints")
    body = mine.body([{"path": "x/y/z.bin", "size": 1, "mtime": 1763700000.0}], host="gpu-b01", root=other.root)
    response = upload(client, mine, body, django_capture_on_commit_callbacks)
    assert response.status_code == 403 and "cannot report for 'gpu-b01'" in response.json()["detail"]
    assert not Inventory.objects.exists()


def test_a_long_inventory_is_ingested_in_bounded_memory(make_host, client, django_capture_on_commit_callbacks):
    kit = make_host()
    count = scale(30_000, 1_000_000)
    files = (
        {"path": f"llm/big-{i // 1000}/step-{i % 1000}/shard-{i}.bin", "size": 4096, "mtime": 1763700000.0}
        for i in range(count)
    )
    text = header(kit) + b"".join(json.dumps({"type": "file", **f}).encode() + b"\n" for f in files)
    text += json.dumps({"type": "end", "files": count, "bytes": count * 4096}).encode() + b"\n"
    body = gzip.compress(text, 6)
    del text
    response, peak, seconds = traced(lambda: upload(client, kit, body, django_capture_on_commit_callbacks))
    inventory = Inventory.objects.get(pk=response.json()["id"])
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert ShardFile.objects.filter(location=kit.location, gone_at__isnull=True).count() == count
    assert peak < PEAK_LIMIT, peak
    report(
        "long inventory",
        f"{count:,} lines ({len(body) / 1024**2:.1f} MiB gzip) applied in {seconds:.0f} s "
        f"({count / seconds:,.0f} lines/s under tracemalloc), peak {peak / 1024**2:.1f} MiB traced",
    )
