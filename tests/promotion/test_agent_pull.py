"""A copy promoted to a host is pulled by the host's agent: moto's S3 over HTTP, the running app, real files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from audit.models import AuditEvent
from catalog.models import ShardFile
from fleet import agent
from promotion import pulls
from promotion.choices import ItemState, JobState
from promotion.models import PromotionItem, PromotionJob
from promotion.services import cancel, promote
from tests.promotion.conftest import events

URL = "/api/v1/agent/promotions/"
ENDINGS = ("promotion.complete", "promotion.fail")


@pytest.fixture
def host(tmp_path, make_host, monkeypatch):
    """gpu-a01 with an empty NVMe root on disk and its token in the agent's environment."""
    root = tmp_path / "nvme0"
    root.mkdir()
    kit = make_host("gpu-a01", str(root))
    monkeypatch.setenv("CKPTFLEET_TOKEN", kit.token)
    monkeypatch.delenv("CKPTFLEET_TOKEN_FILE", raising=False)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    return kit, root


def pull_to(kit, host_kit, step: int, files: dict[str, bytes]) -> PromotionJob:
    """A checkpoint whose bucket copy holds ``files``, promoted to the host: awaiting its agent."""
    _checkpoint, copy = kit.checkpoint(step, {name: (body, "STANDARD") for name, body in files.items()})
    job = promote(copy=copy, target_location=host_kit.location, actor=kit.actor, reason="restart on gpu-a01")
    assert job.state == JobState.AWAITING_AGENT
    return job


def run_pulls(server: str, root: Path, *extra: str) -> int:
    return agent.main(["--server", server, "--host", "gpu-a01", "--root", str(root), "--pulls", *extra])


def target(root: Path, step: int, name: str) -> Path:
    return root / "llm" / "llama" / f"step-{step}" / name


def leftovers(*dirs: Path) -> list[Path]:
    return [p for d in dirs for p in d.rglob(".ckptfleet-pull-*")]


def items_of(job: PromotionJob) -> dict[str, tuple[str, str]]:
    return {i.path.rsplit("/", 1)[1]: (i.state, i.detail) for i in job.items.all()}


def endings(job: PromotionJob) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action__in=ENDINGS, after__promotion=job.pk).order_by("id"))


# --- end to end ---------------------------------------------------------------------------------------


def test_the_agent_pulls_the_files_and_the_job_completes_with_one_event(
    live_server, kit, host, client, tmp_path, built_agent, oldest_python
):
    host_kit, root = host
    files = {".metadata": b"m" * 300, "__0_0.distcp": os.urandom(70_000), "__1_0.distcp": b"\x00" * 4096}
    job = pull_to(kit, host_kit, 300, files)
    known = hashlib.sha256(files["__0_0.distcp"]).hexdigest()
    ShardFile.objects.filter(path="llm/llama/step-300/__0_0.distcp").update(checksum=known, checksum_algo="sha256")

    # The real agent, the single file `make agent` builds, copied alone and run by the oldest Python it supports,
    # as on a locked-down host.
    copied = tmp_path / "bin" / "ckptfleet-agent.pyz"
    copied.parent.mkdir()
    shutil.copy(built_agent, copied)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CKPTFLEET_", "PYTHON", "AWS_"))}
    env["CKPTFLEET_TOKEN"] = host_kit.token
    command = [oldest_python, "-I", str(copied), "--server", live_server.url, "--host", "gpu-a01"]
    result = subprocess.run(
        [*command, "--root", str(root), "--pulls", "--wait"],
        capture_output=True,
        text=True,
        env=env,
        cwd=copied.parent,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr
    assert f"gpu-a01:{root}: 3 pulled, 0 refused, 0 failed" in result.stdout
    for name, body in files.items():
        assert target(root, 300, name).read_bytes() == body
    assert leftovers(root) == []
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED, job.error
    assert (job.items_done, job.bytes_done, job.items_blocked) == (3, job.bytes_total, 0)
    assert job.bytes_total == sum(len(b) for b in files.values())
    assert job.started_at is not None and job.finished_at is not None and job.heartbeat_at is not None
    details = {name: detail for name, (_state, detail) in items_of(job).items()}
    assert "sha256, MD5 = ETag checked" in details["__0_0.distcp"] and known in details["__0_0.distcp"]
    assert "MD5 = ETag checked" in details[".metadata"]
    [done] = endings(job)
    assert (done.action, done.actor_kind, done.actor_label, done.source) == (
        "promotion.complete",
        "host",
        "gpu-a01",
        "agent",
    )
    assert done.after["bytes_done"] == job.bytes_total and done.after["items_failed"] == 0
    # The agent reported the root afterwards: the catalog sees the pulled files at the host.
    present = ShardFile.objects.filter(location=host_kit.location, gone_at__isnull=True)
    assert sorted(present.values_list("path", flat=True)) == sorted(f"llm/llama/step-300/{n}" for n in files)

    # Progress is visible to people: the promotion API and the jobs list.
    client.force_login(kit.viewer)
    shown = client.get(f"/api/v1/promotions/{job.pk}/").json()
    assert (shown["state"], shown["percent"], shown["items_done"]) == ("completed", 100, 3)
    jobs = {j["key"]: j for j in client.get("/api/v1/jobs/", {"kind": "promotion"}).json()["jobs"]}
    entry = jobs[f"promotion:{job.pk}"]
    assert (entry["done"], entry["total"], entry["unit"], entry["percent"]) == (
        job.bytes_total,
        job.bytes_total,
        "bytes",
        100,
    )

    # A second run has nothing to do and changes nothing.
    assert run_pulls(live_server.url, root) == 0
    assert len(endings(job)) == 1


def test_progress_shows_as_the_agent_reports_file_by_file(kit, host, client):
    host_kit, _root = host
    job = pull_to(kit, host_kit, 310, {"a": b"a" * 1000, "b": b"b" * 3000})
    listed = client.get(URL, **host_kit.auth()).json()
    assert listed["host"] == "gpu-a01" and listed["unavailable"] == []
    by_path = {i["path"]: i for i in listed["items"]}
    first = by_path["llm/llama/step-310/a"]
    assert first["url"].startswith(kit.s3.url) and first["expires_in"] == pulls.presign_seconds()
    assert (first["size"], first["sha256"], first["target"]) == (1000, None, f"{host_kit.root}/llm/llama/step-310/a")
    assert first["etag"] == ShardFile.objects.get(path="llm/llama/step-310/a").etag

    sha = hashlib.sha256(b"a" * 1000).hexdigest()
    body = {"results": [{"id": first["id"], "result": "pulled", "detail": "pulled", "size": 1000, "sha256": sha}]}
    answer = client.post(URL, json.dumps(body), content_type="application/json", **host_kit.auth())

    assert answer.status_code == 200 and answer.json()["done"] == 1
    job.refresh_from_db()
    assert (job.state, job.items_done, job.bytes_done, job.bytes_total) == (JobState.AWAITING_AGENT, 1, 1000, 4000)
    client.force_login(kit.viewer)
    progress = client.get(f"/promotions/{job.pk}/progress.json").json()
    assert (progress["percent"], progress["items_done"], progress["open"]) == (25, 1, True)
    assert progress["heartbeat_at"] is not None
    page = client.get(f"/promotions/{job.pk}/").content.decode()
    assert "--pulls" in page and "Last heard from" in page
    assert endings(job) == []
    # Reported twice: ignored, counted once.
    again = client.post(URL, json.dumps(body), content_type="application/json", **host_kit.auth())
    assert again.json()["ignored"] == 1
    job.refresh_from_db()
    assert job.bytes_done == 1000


def test_a_multipart_object_is_checked_by_size_and_never_by_its_etag(live_server, kit, host):
    host_kit, root = host
    job = pull_to(kit, host_kit, 320, {"small": b"s" * 10})
    body = os.urandom(5 * 1024 * 1024) + b"tail"
    key = f"{kit.source.prefix}llm/llama/step-320/big.distcp"
    client = kit.s3.client
    upload = client.create_multipart_upload(Bucket=kit.source_name, Key=key)
    parts = []
    for number, chunk in enumerate((body[: 5 * 1024 * 1024], body[5 * 1024 * 1024 :]), start=1):
        part = client.upload_part(
            Bucket=kit.source_name, Key=key, UploadId=upload["UploadId"], PartNumber=number, Body=chunk
        )
        parts.append({"PartNumber": number, "ETag": part["ETag"]})
    done = client.complete_multipart_upload(
        Bucket=kit.source_name, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
    )
    etag = done["ETag"].strip('"')
    assert etag.endswith("-2")
    small = job.items.get()
    PromotionItem.objects.create(
        job=job,
        path="llm/llama/step-320/big.distcp",
        source_key=key,
        target_key=f"{host_kit.root}/llm/llama/step-320/big.distcp",
        size=len(body),
        etag=etag,
        state=ItemState.READY,
    )
    PromotionJob.objects.filter(pk=job.pk).update(items_total=2, bytes_total=small.size + len(body))

    assert run_pulls(live_server.url, root) == 0

    assert target(root, 320, "big.distcp").read_bytes() == body
    big = job.items.get(path__endswith="big.distcp")
    assert big.state == ItemState.DONE and "size checked" in big.detail and "MD5" not in big.detail
    assert PromotionJob.objects.get(pk=job.pk).state == JobState.COMPLETED


# --- refusals ---------------------------------------------------------------------------------------


def test_a_token_of_another_host_can_neither_list_nor_report_its_pulls(kit, host, make_host, client, tmp_path):
    host_kit, root = host
    job = pull_to(kit, host_kit, 330, {"a": b"a" * 10, "b": b"b" * 20})
    other = make_host("gpu-b02", str(tmp_path / "b02"))
    theirs_job = promote(copy=job.source_copy, target_location=other.location, actor=kit.actor, reason="spare host")
    own_item = theirs_job.items.first()
    ids = list(job.items.values_list("pk", flat=True))
    audit_before = AuditEvent.objects.count()

    mine = client.get(URL, **host_kit.auth()).json()
    assert sorted(i["id"] for i in mine["items"]) == sorted(ids)
    listed = client.get(URL, **other.auth()).json()
    assert {i["id"] for i in listed["items"]} == set(theirs_job.items.values_list("pk", flat=True))
    asked = client.get(URL, {"root": str(root)}, **other.auth())
    assert asked.status_code == 400 and "not a registered root of gpu-b02" in asked.json()["detail"]

    # One of its own files and one of gpu-a01's: the whole report is refused.
    body = {
        "results": [
            {"id": own_item.pk, "result": "pulled", "size": own_item.size},
            {"id": ids[0], "result": "pulled", "size": 10},
        ]
    }
    refused = client.post(URL, json.dumps(body), content_type="application/json", **other.auth())
    assert refused.status_code == 403 and "nothing was recorded" in refused.json()["detail"]
    assert str(ids[0]) in refused.json()["detail"]
    assert not PromotionItem.objects.exclude(state=ItemState.READY).exists()
    assert PromotionJob.objects.filter(items_done__gt=0).count() == 0
    assert AuditEvent.objects.count() == audit_before
    unknown = client.post(
        URL,
        json.dumps({"results": [{"id": 999_999, "result": "failed"}]}),
        content_type="application/json",
        **other.auth(),
    )
    assert unknown.status_code == 403
    assert client.get(URL).status_code in (401, 403)
    assert client.post(URL, "{}", content_type="application/json").status_code in (401, 403)


def test_a_malformed_report_is_refused_whole(kit, host, client):
    host_kit, _root = host
    job = pull_to(kit, host_kit, 340, {"a": b"a" * 10, "b": b"b" * 20})
    a, b = job.items.order_by("path")
    bad = [
        {"results": []},
        {"results": [{"id": a.pk, "result": "pulled", "size": 10}, {"id": b.pk, "result": "copied"}]},
        {"results": [{"id": a.pk, "result": "pulled"}]},  # no measured size
        {"results": [{"id": a.pk, "result": "pulled", "size": 10, "sha256": "not-a-digest"}]},
        {"results": [{"id": str(a.pk), "result": "failed"}]},
        {"nothing": True},
    ]
    for body in bad:
        answer = client.post(URL, json.dumps(body), content_type="application/json", **host_kit.auth())
        assert answer.status_code == 400, body
        assert answer.json()["error"] == "bad_report"
    assert not job.items.exclude(state=ItemState.READY).exists()
    assert PromotionJob.objects.get(pk=job.pk).items_done == 0


def test_a_reported_size_or_sha256_other_than_the_frozen_one_fails_the_file(kit, host, client):
    host_kit, _root = host
    job = pull_to(kit, host_kit, 345, {"a": b"a" * 10})
    item = job.items.get()
    ShardFile.objects.filter(pk=item.shard_file_id).update(checksum="0" * 64, checksum_algo="sha256")
    body = {"results": [{"id": item.pk, "result": "pulled", "size": 10, "sha256": "1" * 64}]}
    assert client.post(URL, json.dumps(body), content_type="application/json", **host_kit.auth()).status_code == 200
    item.refresh_from_db()
    assert item.state == ItemState.FAILED and "the catalog has 000" in item.detail
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.bytes_done == 0
    assert [e.action for e in endings(job)] == ["promotion.fail"]


def test_an_existing_file_is_never_overwritten_and_the_job_fails_saying_why(live_server, kit, host, capsys):
    host_kit, root = host
    files = {"same": b"identical" * 10, "other": b"x" * 64, "longer": b"y" * 64}
    job = pull_to(kit, host_kit, 350, files)
    target(root, 350, "same").parent.mkdir(parents=True)
    target(root, 350, "same").write_bytes(files["same"])  # identical: counts as pulled
    target(root, 350, "other").write_bytes(b"z" * 64)  # same size, other content
    target(root, 350, "longer").write_bytes(b"local")

    assert run_pulls(live_server.url, root) == 1

    assert target(root, 350, "other").read_bytes() == b"z" * 64
    assert target(root, 350, "longer").read_bytes() == b"local"
    assert leftovers(root) == []
    err = capsys.readouterr().err
    assert all(line.startswith("ckptfleet-agent: ") for line in err.splitlines()), err
    assert "never overwritten" in err
    states = items_of(PromotionJob.objects.get(pk=job.pk))
    assert states["same"][0] == ItemState.DONE
    assert states["same"][1].startswith("already at the target, identical (MD5 = ETag checked); sha256 ")
    assert states["other"][0] == ItemState.BLOCKED and "its checksum differs" in states["other"][1]
    assert states["longer"][0] == ItemState.BLOCKED and "5 bytes, not 64" in states["longer"][1]
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert "2 were blocked" in job.error and "never overwritten" in job.error
    assert (job.items_done, job.items_blocked) == (1, 2)
    [failed] = endings(job)
    assert (failed.action, failed.actor_label, failed.reason) == ("promotion.fail", "gpu-a01", job.error)


def test_a_download_that_does_not_match_leaves_no_file_behind(live_server, kit, host):
    host_kit, root = host
    files = {"changed": b"c" * 100, "short": b"s" * 100, "wrong-sha": b"w" * 100, "fine": b"f" * 100}
    job = pull_to(kit, host_kit, 360, files)
    kit.s3.client.put_object(  # rewritten since the request: another ETag
        Bucket=kit.source_name, Key=f"{kit.source.prefix}llm/llama/step-360/changed", Body=b"C" * 100
    )
    job.items.filter(path__endswith="/short").update(size=99)  # the catalog's size is not the object's
    ShardFile.objects.filter(path="llm/llama/step-360/wrong-sha").update(checksum="e" * 64, checksum_algo="sha256")

    assert run_pulls(live_server.url, root) == 1

    step = root / "llm" / "llama" / "step-360"
    assert sorted(p.name for p in step.iterdir()) == ["fine"]
    assert leftovers(root) == []
    states = items_of(PromotionJob.objects.get(pk=job.pk))
    assert states["changed"][0] == ItemState.FAILED and "changed since" in states["changed"][1]
    assert states["short"][0] == ItemState.FAILED and "the promotion froze 99" in states["short"][1]
    assert states["wrong-sha"][0] == ItemState.FAILED and "the catalog has eee" in states["wrong-sha"][1]
    assert states["fine"][0] == ItemState.DONE
    job.refresh_from_db()
    assert job.state == JobState.FAILED and "3 file(s) failed" in job.error
    assert [e.action for e in endings(job)] == ["promotion.fail"]


def test_a_hostile_target_path_is_refused_and_nothing_is_written_outside_the_root(live_server, kit, host, tmp_path):
    host_kit, root = host
    outside = tmp_path / "outside"
    outside.mkdir()
    job = pull_to(kit, host_kit, 370, {"dotdot": b"1" * 10, "elsewhere": b"2" * 10, "linked": b"3" * 10})
    items = {i.path.rsplit("/", 1)[1]: i for i in job.items.all()}
    PromotionItem.objects.filter(pk=items["dotdot"].pk).update(
        path="../outside/dotdot", target_key=f"{host_kit.root}/../outside/dotdot"
    )
    PromotionItem.objects.filter(pk=items["elsewhere"].pk).update(target_key=str(outside / "elsewhere"))
    # A symlink planted on the way leads out of the root.
    PromotionItem.objects.filter(pk=items["linked"].pk).update(
        path="escape/linked", target_key=f"{host_kit.root}/escape/linked"
    )
    (root / "escape").symlink_to(outside, target_is_directory=True)

    assert run_pulls(live_server.url, root) == 1

    assert list(outside.iterdir()) == []
    assert leftovers(root, outside) == []
    details = {i.pk: (i.state, i.detail) for i in PromotionItem.objects.filter(job=job)}
    assert details[items["dotdot"].pk] == (ItemState.BLOCKED, "refused: not a plain relative path below the root")
    assert details[items["elsewhere"].pk] == (ItemState.BLOCKED, "refused: the target is not the path below this root")
    assert details[items["linked"].pk][0] == ItemState.BLOCKED
    assert "escape on its path is a symlink" in details[items["linked"].pk][1]
    job.refresh_from_db()
    assert job.state == JobState.FAILED and len(endings(job)) == 1


# --- cancel and dry run ----------------------------------------------------------------------------


def test_a_cancelled_pull_is_not_served_and_its_reports_are_ignored(live_server, kit, host, client):
    host_kit, root = host
    job = pull_to(kit, host_kit, 380, {"a": b"a" * 10})
    item = job.items.get()
    cancel(job=job, actor=kit.actor, reason="restarted elsewhere")

    assert client.get(URL, **host_kit.auth()).json()["items"] == []
    assert run_pulls(live_server.url, root) == 0
    assert not (root / "llm").exists()
    late = {"results": [{"id": item.pk, "result": "pulled", "size": 10}]}
    answer = client.post(URL, json.dumps(late), content_type="application/json", **host_kit.auth())
    assert answer.status_code == 200 and answer.json()["ignored"] == 1
    job.refresh_from_db()
    assert (job.state, job.items_done) == (JobState.CANCELLED, 0)
    assert endings(job) == [] and len(events("promotion.cancel")) == 1


def test_a_dry_run_says_what_it_would_pull_and_changes_nothing(live_server, kit, host, capsys):
    host_kit, root = host
    job = pull_to(kit, host_kit, 390, {"a": b"a" * 2048})
    capsys.readouterr()

    assert run_pulls(live_server.url, root, "--dry-run") == 0

    out = capsys.readouterr().out
    assert "llm/llama/step-390/a: would pull: 2.0 KiB from s3://" in out
    assert "1 would be pulled" in out and "nothing written or reported" in out
    assert list(root.iterdir()) == []
    job.refresh_from_db()
    assert (job.state, job.items_done) == (JobState.AWAITING_AGENT, 0)
    assert not job.items.exclude(state=ItemState.READY).exists()
