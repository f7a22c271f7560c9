"""A real S3 HTTP endpoint for the tests: moto's server on a free local port, and helpers to fill it.

Loaded as a plugin by ``tests/conftest.py``. The server starts once per session, the first time a
test asks for ``s3``; every test then gets an emptied server. While it runs, the AWS variables name
dummy keys and point the shared config files nowhere, so boto3's default chain (what a bucket's
``credentials="default"`` means) finds those keys and never a developer's own. A Celery worker
started by a test inherits them.
"""

from __future__ import annotations

import fnmatch
import os
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from dashboard.management.commands.seed_demo import DEMO_TREES as TREES

REGION = "us-east-1"
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
}
AWS_UNSET = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory) -> Iterator[str]:
    """The URL of a moto S3 server on 127.0.0.1, running for the rest of the session."""
    from tests.conftest import need_service

    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:  # pragma: no cover - moto[server] is a dev dependency
        need_service("an S3 endpoint (moto[server])", False, str(exc))
    nowhere = tmp_path_factory.mktemp("aws") / "none"
    with pytest.MonkeyPatch.context() as mp:
        for name, value in AWS_ENV.items():
            mp.setenv(name, value)
        mp.setenv("AWS_CONFIG_FILE", str(nowhere))
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", str(nowhere))
        for name in AWS_UNSET:
            mp.delenv(name, raising=False)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        try:
            server.start()
            host, port = server.get_host_and_port()
        except Exception as exc:
            need_service("an S3 endpoint (moto's server)", False, f"it did not start: {exc}")
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()


class S3Kit:
    """A boto3 client on the test endpoint, and the few things tests do with it."""

    def __init__(self, url: str) -> None:
        import boto3
        from botocore.config import Config

        self.url = url
        self.client = boto3.client(
            "s3", endpoint_url=url, region_name=REGION, config=Config(s3={"addressing_style": "path"})
        )

    def bucket(self, name: str = "", *, versioned: bool = False, object_lock: bool = False) -> str:
        """Create a bucket (a unique name unless given); Object Lock implies versioning, as on S3."""
        name = name or f"ckpt-{uuid.uuid4().hex[:12]}"
        kwargs: dict[str, Any] = {"Bucket": name}
        if object_lock:
            kwargs["ObjectLockEnabledForBucket"] = True
        self.client.create_bucket(**kwargs)
        if versioned and not object_lock:
            self.client.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return name

    def put(self, bucket: str, key: str, body: bytes, **kwargs: Any) -> dict:
        kwargs.setdefault("ChecksumAlgorithm", "SHA256")
        return self.client.put_object(Bucket=bucket, Key=key, Body=body, **kwargs)

    def upload_tree(
        self,
        bucket: str,
        tree: str,
        *,
        prefix: str = "",
        storage_class: str = "STANDARD",
        classes: dict[str, str] | None = None,
        extra: dict[str, dict[str, Any]] | None = None,
    ) -> dict[str, dict]:
        """Upload a fixture tree (demo/trees/NAME) below ``prefix``, with SHA256 checksums.

        Files go up in the order they were written (their mtimes), so a manifest written last is
        uploaded last, as a real copy job would. ``classes`` maps glob patterns of the relative path
        to storage classes (first match wins); ``extra`` adds put_object arguments by relative path.
        Returns the put_object answers by key.
        """
        root = TREES / tree
        files = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: (p.stat().st_mtime_ns, str(p)))
        answers = {}
        for path in files:
            rel = path.relative_to(root).as_posix()
            cls = next((c for pattern, c in (classes or {}).items() if fnmatch.fnmatch(rel, pattern)), storage_class)
            key = prefix + rel
            answers[key] = self.put(bucket, key, path.read_bytes(), StorageClass=cls, **(extra or {}).get(rel, {}))
        return answers

    def register(self, bucket: str, *, name: str = "", prefix: str = "", **kwargs: Any):
        """Register the bucket as a storage location pointing at this endpoint."""
        from audit.actor import Actor
        from ingest.scan import bucket_add

        kwargs.setdefault("endpoint_url", self.url)
        kwargs.setdefault("region_name", REGION)
        kwargs.setdefault("addressing_style", "path")
        return bucket_add(
            name=name or f"s3:{bucket}/{prefix}",
            bucket_name=bucket,
            prefix=prefix,
            actor=Actor.command(label="tests"),
            **kwargs,
        )


def _reset(url: str) -> None:
    request = urllib.request.Request(f"{url}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


@pytest.fixture
def s3(moto_endpoint) -> S3Kit:
    """An emptied moto server and a client on it."""
    _reset(moto_endpoint)
    return S3Kit(moto_endpoint)


@pytest.fixture
def s3_calls(monkeypatch) -> Counter:
    """Counts the S3 operations the scanner calls, by name ("GetObject") and by (name, bucket); not retries."""
    import fleet.s3

    counts: Counter = Counter()
    original = fleet.s3.client_for

    def counting(bucket):
        client = original(bucket)

        def count(model, params, **kwargs):
            counts[model.name] += 1
            counts[(model.name, params.get("Bucket"))] += 1

        client.meta.events.register("before-parameter-build.s3", count)
        return client

    monkeypatch.setattr(fleet.s3, "client_for", counting)
    return counts


def aws_env() -> dict[str, str]:
    """The AWS variables a subprocess needs to reach the test endpoint (they are in os.environ already)."""
    return {k: os.environ[k] for k in AWS_ENV if k in os.environ}


@pytest.fixture
def scan_now(django_capture_on_commit_callbacks):
    """Start a scan of a registered bucket and let its task run, as a worker would once the transaction commits."""
    from audit.actor import Actor
    from ingest.scan import scan_start

    def run(bucket):
        with django_capture_on_commit_callbacks(execute=True):
            inventory = scan_start(location=bucket.location, actor=Actor.command(label="tests"))
        inventory.refresh_from_db()
        return inventory

    return run
