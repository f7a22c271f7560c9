"""Verification of copies: agreeing checksums verify, a flipped byte is caught, unlike checksums are not compared."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from catalog import selectors
from catalog.choices import CopyState, Verification
from catalog.models import CheckpointCopy, ShardFile
from catalog.verification import (
    CopyEvidence,
    FileFacts,
    checkpoints_verify,
    checksum,
    content_print,
    failure_domain,
    judge,
    relative_checksums,
    relative_path,
)
from fleet.models import Host, StorageLocation

URL = "/api/v1/inventories/"
LONE = "no reference: this is the only copy and its writer recorded no checksums"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# --- the pure core --------------------------------------------------------------------------------


def copy(pk: int, where: str, files: dict[str, FileFacts], **kwargs) -> CopyEvidence:
    return CopyEvidence(id=pk, where=where, files=files, **kwargs)


def hashed(**digests: str) -> dict[str, FileFacts]:
    return {name.replace("_", "."): FileFacts(4096, "sha256", sha(value)) for name, value in digests.items()}


SHARDS = {"__0_0.distcp": "rank 0", "__1_0.distcp": "rank 1"}


def shards(**overrides: str) -> dict[str, FileFacts]:
    values = {**SHARDS, **overrides}
    return {name: FileFacts(4096, "sha256", sha(value)) for name, value in values.items()}


class TestJudge:
    def test_two_agreeing_copies_verify_each_other(self):
        verdicts = judge([copy(1, "gpu-a", shards()), copy(2, "gpu-b", shards())])
        assert verdicts[1].verification == Verification.VERIFIED
        assert verdicts[1].reasons == ["all 2 files agree with the copy at gpu-b"]
        assert verdicts[2].reasons == ["all 2 files agree with the copy at gpu-a"]

    def test_a_flipped_checksum_between_two_copies_disputes_both_as_nobody_can_tell_which_is_right(self):
        verdicts = judge([copy(1, "gpu-a", shards()), copy(2, "gpu-b", shards(**{"__1_0.distcp": "flipped"}))])
        for pk, other in ((1, "gpu-b"), (2, "gpu-a")):
            assert verdicts[pk].verification == Verification.DISPUTED
            assert verdicts[pk].corrupt == []  # neither is condemned on the other's word (promise 10)
            assert verdicts[pk].reasons[0] == (
                f"__1_0.distcp: sha256 differs from the copy at {other}, and nothing independent says which is right"
            )
            assert verdicts[pk].reasons[-1].startswith("to settle it: a checksum written at save time")

    def test_the_majority_of_three_copies_tells_which_one_is_corrupt(self):
        verdicts = judge(
            [
                copy(1, "gpu-a", shards()),
                copy(2, "gpu-b", shards(**{"__0_0.distcp": "flipped"})),
                copy(3, "s3-eu", shards()),
            ]
        )
        assert verdicts[2].verification == Verification.MISMATCH
        assert verdicts[2].corrupt == [
            "__0_0.distcp: sha256 differs from the copies at gpu-a and s3-eu, which agree with each other "
            "(2 of 3 copies)"
        ]
        assert verdicts[2].basis == "majority"
        assert verdicts[1].verification == verdicts[3].verification == Verification.VERIFIED
        assert verdicts[1].basis == verdicts[3].basis == "majority"
        # gpu-b agrees on one file only: the verdict names the copy every file agrees with.
        assert verdicts[1].reasons == ["all 2 files agree with the copy at s3-eu"]
        assert verdicts[1].corrupt == []

    def test_the_writers_manifest_verifies_a_single_copy(self):
        manifest = {name: ["sha256", sha(value)] for name, value in SHARDS.items()}
        verdicts = judge([copy(1, "gpu-a", shards(), manifest=manifest)])
        assert verdicts[1].verification == Verification.VERIFIED
        assert verdicts[1].reasons == ["all 2 files agree with the writer's manifest"]

    def test_a_copy_that_disagrees_with_its_own_manifest_is_a_mismatch_its_format_already_made_corrupt(self):
        manifest = {name: ["sha256", sha(value)] for name, value in SHARDS.items()}
        bad = shards(**{"__0_0.distcp": "flipped"})
        found_corrupt = judge([copy(1, "gpu-a", bad, manifest=manifest, state=CopyState.CORRUPT)])[1]
        assert found_corrupt.verification == Verification.MISMATCH
        assert found_corrupt.reasons == [
            "__0_0.distcp: sha256 differs from the writer's manifest recorded with this copy"
        ]
        assert found_corrupt.corrupt == []  # the format's own reason says it already
        not_yet = judge([copy(1, "gpu-a", bad, manifest=manifest)])[1]
        assert not_yet.corrupt == not_yet.reasons

    def test_another_copys_manifest_outranks_a_majority_of_peers(self):
        manifest = {name: ["sha256", sha(value)] for name, value in SHARDS.items()}
        flipped = shards(**{"__0_0.distcp": "flipped"})
        verdicts = judge(
            [
                copy(1, "gpu-a", shards(), manifest=manifest),
                copy(2, "gpu-b", flipped),
                copy(3, "gpu-c", flipped),
            ]
        )
        assert verdicts[1].verification == Verification.VERIFIED
        assert verdicts[2].corrupt == [
            "__0_0.distcp: sha256 differs from the writer's manifest recorded with the copy at gpu-a"
        ]
        assert verdicts[3].verification == Verification.MISMATCH

    def test_two_saves_that_each_match_their_manifest_are_flagged_but_not_corrupt(self):
        other = {"__0_0.distcp": "another save", "__1_0.distcp": "rank 1"}
        verdicts = judge(
            [
                copy(1, "gpu-a", shards(), manifest={k: ["sha256", sha(v)] for k, v in SHARDS.items()}),
                copy(2, "gpu-b", shards(**other), manifest={k: ["sha256", sha(v)] for k, v in other.items()}),
            ]
        )
        for verdict in verdicts.values():
            assert verdict.verification == Verification.MISMATCH
            assert verdict.corrupt == []
            assert "each matches its own writer's manifest" in verdict.reasons[0]

    def test_incomparable_algorithms_leave_a_copy_unverified_and_say_why(self):
        composite = {name: FileFacts(4096, "sha256-composite", "abc" * 10) for name in SHARDS}
        verdicts = judge([copy(1, "gpu-a", shards()), copy(2, "s3-eu", composite)])
        assert verdicts[2].verification == Verification.UNVERIFIED
        assert verdicts[2].reasons == [
            "checksums not comparable: 2 of 2 files have sha256-composite here, the references sha256"
        ]
        assert verdicts[1].verification == Verification.UNVERIFIED
        assert verdicts[1].reasons == [
            "checksums not comparable: 2 of 2 files have sha256 here, the references sha256-composite"
        ]

    def test_a_crc_is_never_compared_with_a_sha256(self):
        crc = {name: FileFacts(4096, "crc64nvme", "0123456789abcdef") for name in SHARDS}
        manifest = {name: ["sha256", sha(value)] for name, value in SHARDS.items()}
        verdict = judge([copy(1, "s3-eu", crc, manifest=manifest)])[1]
        assert verdict.verification == Verification.UNVERIFIED
        assert "checksums not comparable: 2 of 2 files have crc64nvme here, the references sha256" in verdict.reasons

    def test_a_multipart_etag_recorded_as_md5_is_not_a_content_checksum(self):
        etag = checksum("md5", '"9b2cf535f27731c974343645a3985328-16"')
        assert etag is not None and not etag.content and "multipart ETag" in etag.label
        files = {name: FileFacts(4096, "md5", "9b2cf535f27731c974343645a3985328-16") for name in SHARDS}
        same = judge([copy(1, "s3-a", files), copy(2, "s3-b", dict(files))])
        assert same[1].verification == Verification.UNVERIFIED
        assert same[1].reasons == [
            "2 of 2 files have only a multipart ETag (not an MD5 of the content), not a checksum of the content"
        ]
        md5 = {name: FileFacts(4096, "md5", "0" * 32) for name in SHARDS}
        against = judge([copy(1, "s3-a", files), copy(2, "gpu-b", md5)])
        prefix = "checksums not comparable: 2 of 2 files have"
        assert against[1].reasons == [f"{prefix} multipart ETag here, the references md5"]
        assert against[2].reasons == [f"{prefix} md5 here, the references multipart ETag"]

    def test_a_true_content_md5_recorded_by_the_writer_is_compared(self):
        md5 = {name: FileFacts(4096, "md5", hashlib.md5(v.encode()).hexdigest()) for name, v in SHARDS.items()}
        manifest = {name: ["MD5", hashlib.md5(v.encode()).hexdigest()] for name, v in SHARDS.items()}
        assert judge([copy(1, "gpu-a", md5, manifest=manifest)])[1].verification == Verification.VERIFIED

    def test_files_without_checksums_are_counted(self):
        files = {**shards(), "extra.bin": FileFacts(10)}
        verdict = judge([copy(1, "gpu-a", files), copy(2, "gpu-b", shards())])[1]
        assert verdict.verification == Verification.UNVERIFIED
        assert verdict.reasons == ["1 of 3 files has no content checksum", "2 of 3 files agree with a reference"]

    def test_a_lone_copy_without_a_manifest_has_no_reference(self):
        verdict = judge([copy(1, "gpu-a", shards())])[1]
        assert verdict.verification == Verification.UNVERIFIED
        assert verdict.reasons == [LONE]

    def test_a_partial_copy_is_not_verified_but_accuses_nobody(self):
        half = shards(**{"__1_0.distcp": "half written"})
        verdicts = judge([copy(1, "gpu-a", shards()), copy(2, "gpu-b", half, state=CopyState.PARTIAL)])
        assert verdicts[1].verification == Verification.UNVERIFIED
        assert any("no reference" in r for r in verdicts[1].reasons)
        # A half-written copy against one complete copy: nothing independent decides, so it is disputed
        # (and already partial, so never offered for a restore).
        assert verdicts[2].verification == Verification.DISPUTED
        assert verdicts[2].corrupt == []
        whole = judge([copy(1, "gpu-a", shards()), copy(2, "gpu-b", shards(), state=CopyState.PARTIAL)])
        assert whole[2].reasons == ["the copy is partial: only a complete copy can be verified as a whole"]

    def test_a_temporary_copy_is_neither_a_reference_nor_verified(self):
        verdicts = judge([copy(1, "gpu-a", shards()), copy(2, "gpu-a-tmp", shards(), temporary=True)])
        assert verdicts[1].reasons == [LONE]
        assert verdicts[2].verification == Verification.UNVERIFIED

    def test_sizes_that_differ_between_complete_copies_are_flagged_on_both(self):
        a = {"model.pt": FileFacts(100)}
        b = {"model.pt": FileFacts(120)}
        verdicts = judge([copy(1, "gpu-a", a), copy(2, "gpu-b", b)])
        assert verdicts[1].verification == verdicts[2].verification == Verification.MISMATCH
        assert verdicts[1].corrupt == verdicts[2].corrupt == []
        assert verdicts[1].reasons[0].startswith("model.pt: 100 B here but 120 B at gpu-b")

    def test_with_three_copies_only_the_odd_size_is_flagged_and_files_of_one_copy_are_not_compared(self):
        same = {"a.pt": FileFacts(10), "b.pt": FileFacts(20)}
        odd = {"a.pt": FileFacts(10), "b.pt": FileFacts(21), "extra.pt": FileFacts(5)}
        verdicts = judge([copy(1, "x", dict(same)), copy(2, "y", dict(same)), copy(3, "z", odd)])
        assert verdicts[3].verification == Verification.MISMATCH
        assert [r for r in verdicts[3].reasons if " B here but " in r] == [
            "b.pt: 21 B here but 20 B at x, 20 B at y, and each copy is complete by its own manifest "
            "(two different saves of this step?)"
        ]
        assert not any(" B here but " in r for c in (1, 2) for r in verdicts[c].reasons)

    def test_the_manifest_file_itself_needs_no_reference(self):
        manifest = {name: ["sha256", sha(value)] for name, value in SHARDS.items()}
        files = {**shards(), "ckptfleet.json": FileFacts(700, "sha256", sha("sidecar"))}
        assert judge([copy(1, "gpu-a", files, manifest=manifest)])[1].verification == Verification.VERIFIED

    def test_the_verdict_does_not_depend_on_the_order_of_copies(self):
        copies = [copy(1, "a", shards()), copy(2, "b", shards(**{"__0_0.distcp": "x"})), copy(3, "c", shards())]
        assert judge(copies) == judge(list(reversed(copies)))


class TestSettling:
    """Copies that disagree are settled by what is independent of either side, in order, or disputed."""

    @staticmethod
    def at(when: float, mtime: float, **overrides: str) -> dict[str, FileFacts]:
        values = {**SHARDS, **overrides}
        return {name: FileFacts(4096, "sha256", sha(value), {"at": when}, mtime) for name, value in values.items()}

    def test_a_copy_the_product_made_after_its_sources_checksum_was_taken_is_the_wrong_one(self):
        # gpu-a's checksums were taken at t=100; offload #7 made the bucket copy from it at t=150 and it differs.
        verdicts = judge(
            [
                copy(1, "gpu-a", self.at(100, 50)),
                copy(
                    2,
                    "s3-eu",
                    self.at(210, 200, **{"__1_0.distcp": "flipped in transit"}),
                    made_from=1,
                    made_at=150.0,
                    made_by="offload #7",
                ),
            ]
        )
        assert verdicts[2].verification == Verification.MISMATCH
        assert verdicts[2].basis == "source"
        assert verdicts[2].corrupt == [
            "__1_0.distcp: sha256 differs from the copy at gpu-a, which this copy was made from by offload #7, whose "
            "checksum was taken before the copy was made (a copy cannot be more right than its source was)"
        ]
        # The source is not accused by a copy made from it, and not verified by it either.
        assert verdicts[1].verification == Verification.UNVERIFIED
        assert verdicts[1].corrupt == []
        assert verdicts[1].reasons == [
            "1 of 2 files differs in the copy at s3-eu, which the product made from this copy after its checksums "
            "were taken: that copy is the wrong one, and nothing else verifies this one",
            "1 of 2 files agrees with a reference",
        ]

    def test_a_copy_written_after_anothers_checksum_was_taken_is_not_its_copy_without_provenance(self):
        # The same times, but nothing records that the bucket copy was made from gpu-a: the order proves nothing.
        verdicts = judge(
            [copy(1, "gpu-a", self.at(100, 50)), copy(2, "s3-eu", self.at(210, 200, **{"__1_0.distcp": "x"}))]
        )
        assert verdicts[1].verification == verdicts[2].verification == Verification.DISPUTED
        assert verdicts[1].corrupt == verdicts[2].corrupt == []

    def test_the_majority_not_the_order_of_writing_settles_copies_without_provenance(self):
        # gpu-a's checksum was taken before both bucket copies were written, and they agree with each other.
        newer = {"__1_0.distcp": "rank 1, saved again"}
        verdicts = judge(
            [
                copy(1, "gpu-a", self.at(100, 50)),
                copy(2, "s3-eu", self.at(210, 200, **newer)),
                copy(3, "s3-us", self.at(310, 300, **newer)),
            ]
        )
        assert verdicts[2].verification == verdicts[3].verification == Verification.VERIFIED
        assert verdicts[2].basis == verdicts[3].basis == "majority"
        assert verdicts[2].corrupt == verdicts[3].corrupt == []
        assert verdicts[1].verification == Verification.MISMATCH and verdicts[1].basis == "majority"

    def test_a_recorded_source_outranks_the_majority_and_its_copys_copy_descends_from_it(self):
        # s3-eu was made from gpu-a after gpu-a's checksum (and differs); s3-us was made from s3-eu and agrees with
        # it. The two bucket copies are one copy's word twice: both are judged against gpu-a, which stands.
        bad = {"__1_0.distcp": "flipped in transit"}
        verdicts = judge(
            [
                copy(1, "gpu-a", self.at(100, 50)),
                copy(2, "s3-eu", self.at(210, 200, **bad), made_from=1, made_at=150.0, made_by="offload #7"),
                copy(3, "s3-us", self.at(310, 300, **bad), made_from=2, made_at=250.0, made_by="promotion #8"),
            ]
        )
        assert verdicts[2].verification == verdicts[3].verification == Verification.MISMATCH
        assert verdicts[2].basis == verdicts[3].basis == "source"
        assert verdicts[1].corrupt == [] and verdicts[1].verification == Verification.UNVERIFIED

    def test_checksums_taken_after_both_were_written_settle_nothing(self):
        verdicts = judge(
            [copy(1, "gpu-a", self.at(300, 50)), copy(2, "s3-eu", self.at(310, 200, **{"__1_0.distcp": "x"}))]
        )
        assert verdicts[1].verification == verdicts[2].verification == Verification.DISPUTED

    def test_a_torch_zip_whose_member_crcs_all_check_outranks_a_copy_that_differs(self):
        good = {"kind": "torch_file", "container": "zip", "complete": True, "members_checked": 4, "members_bad": []}
        host = {"model.pt": FileFacts(4096, "sha256", sha("good"), None, 0.0, good)}
        bucket = {"model.pt": FileFacts(4096, "sha256", sha("bad"))}
        verdicts = judge([copy(1, "gpu-a", host), copy(2, "s3-eu", bucket)])
        assert verdicts[2].verification == Verification.MISMATCH and verdicts[2].basis == "format"
        assert verdicts[2].corrupt == [
            "model.pt: sha256 differs from the copy at gpu-a, whose every zip member's CRC32 checks"
        ]
        assert verdicts[1].verification == Verification.VERIFIED and verdicts[1].basis == "format"

    def test_three_copies_all_different_are_disputed_not_settled_by_a_false_majority(self):
        verdicts = judge(
            [
                copy(1, "a", shards()),
                copy(2, "b", shards(**{"__0_0.distcp": "x"})),
                copy(3, "c", shards(**{"__0_0.distcp": "y"})),
            ]
        )
        assert {v.verification for v in verdicts.values()} == {Verification.DISPUTED}


class TestChecksums:
    def test_s3_base64_checksums_become_hex(self):
        digest = hashlib.sha256(b"x").digest()
        assert checksum("SHA256", base64.b64encode(digest).decode()).digest == digest.hex()
        assert checksum("sha-256", digest.hex().upper()).digest == digest.hex()

    def test_what_is_not_a_content_digest_says_what_it_is(self):
        assert "composite" in checksum("sha256-composite", "x").label
        assert "unknown algorithm 'blake3'" in checksum("blake3", "ab").label
        assert "malformed" in checksum("sha256", "xyz").label
        assert checksum("", "ab") is None and checksum("sha256", "") is None

    def test_paths_are_relative_to_the_copy_directory_or_a_single_files_directory(self):
        assert relative_path("llm/r/step-1/__0_0.distcp", "llm/r/step-1") == "__0_0.distcp"
        assert relative_path("llm/r/last.ckpt", "llm/r/last.ckpt") == "last.ckpt"
        assert relative_path("llm/r/iter_0000010.unfinished", "llm/r/iter_0000010") == "iter_0000010.unfinished"
        refs = {"llm/r/step-1/a/b.bin": ("sha256", "ab")}
        assert relative_checksums("llm/r/step-1", refs) == {"a/b.bin": ["sha256", "ab"]}


# --- through ingestion ----------------------------------------------------------------------------


def dcp(step: int, *, run: str = "llama-7b", checksums: bool = True, **contents: str) -> list[dict]:
    """A DCP checkpoint as the agent reports it, with sha256s of made-up contents."""
    base = f"llm/{run}/step-{step}"
    values = {"__0_0.distcp": "rank 0", "__1_0.distcp": "rank 1", **contents}
    files = [
        {
            "path": f"{base}/.metadata",
            "size": 900,
            "mtime": 1763700000.0,
            "facts": {"kind": "dcp_metadata", "files": dict.fromkeys(values, 4096)},
            **({"sha256": sha("metadata")} if checksums else {}),
        }
    ]
    for name, value in values.items():
        line = {"path": f"{base}/{name}", "size": 4096, "mtime": 1763699990.0}
        if checksums:
            line["sha256"] = sha(value)
        files.append(line)
    return files


@pytest.fixture
def push(client, django_capture_on_commit_callbacks):
    """Upload an inventory through the API and let its ingestion task run, as the worker would."""

    def push(kit, files: list[dict]):
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(
                URL,
                data=kit.body(files),
                content_type="application/x-ndjson",
                HTTP_CONTENT_ENCODING="gzip",
                **kit.auth(),
            )
        assert response.status_code == 202, response.content
        return response

    return push


@pytest.fixture
def two_hosts(make_host):
    return make_host("gpu-a01"), make_host("gpu-b01")


def copy_at(kit, step: int = 100) -> CheckpointCopy:
    return CheckpointCopy.objects.get(location=kit.location, checkpoint__step=step, gone_at__isnull=True)


def test_two_copies_with_the_same_checksums_are_verified_in_two_failure_domains(two_hosts, push):
    a, b = two_hosts
    push(a, dcp(100))
    assert copy_at(a).verification == Verification.UNVERIFIED
    assert copy_at(a).verification_reasons == [LONE]
    push(b, dcp(100))
    for kit, other in ((a, b), (b, a)):
        copy = copy_at(kit)
        assert (copy.state, copy.verification) == (CopyState.COMPLETE, Verification.VERIFIED)
        assert copy.verification_reasons == [f"all 3 files agree with the copy at {other.location.name}"]
    summary = selectors.verification_summary([copy_at(a).checkpoint_id])[copy_at(a).checkpoint_id]
    assert (summary.verified, summary.domains) == (2, ("host gpu-a01", "host gpu-b01"))


def test_a_flipped_checksum_makes_the_copies_disagree_and_a_fix_makes_them_agree_again(two_hosts, push):
    a, b = two_hosts
    push(a, dcp(100))
    push(b, dcp(100, **{"__1_0.distcp": "one flipped byte"}))
    flipped, other = copy_at(b), copy_at(a)
    # With two copies and nothing independent (no manifest, no checksum taken before the other copy was
    # written) nobody can tell which is right: both are disputed, neither condemned (promise 10).
    for copy, there in ((flipped, a), (other, b)):
        assert (copy.state, copy.verification) == (CopyState.COMPLETE, Verification.DISPUTED)
        reason = f"__1_0.distcp: sha256 differs from the copy at {there.location.name}, and nothing independent"
        assert copy.verification_reasons[0].startswith(reason)
        assert copy.reasons == []

    # b's file is copied again (a new mtime: the same mtime with other bytes would be damage) and only b
    # reports again: a, not re-judged, gets back what its formats said of it.
    fixed = dcp(100)
    for line in fixed:
        line["mtime"] += 60
    push(b, fixed)
    for kit in (a, b):
        copy = copy_at(kit)
        assert (copy.state, copy.verification, copy.reasons) == (CopyState.COMPLETE, Verification.VERIFIED, [])


def test_a_host_checksum_taken_before_the_other_copy_was_written_settles_nothing_without_provenance(two_hosts, push):
    a, b = two_hosts
    source = dcp(100)
    for line in source:
        line["checksummed_at"] = 1763700100.0  # hashed by a's agent before b's copy was written
    push(a, source)
    copied = dcp(100, **{"__1_0.distcp": "one flipped byte"})
    for line in copied:
        line["mtime"], line["checksummed_at"] = 1763700500.0, 1763700600.0
    push(b, copied)
    # Nothing records that b was copied from a: which was written first says nothing about which is right.
    for kit in (a, b):
        copy = copy_at(kit)
        assert (copy.state, copy.verification) == (CopyState.COMPLETE, Verification.DISPUTED), copy.reasons
    stored = ShardFile.objects.get(location=a.location, path="llm/llama-7b/step-100/__0_0.distcp")
    assert stored.digests == {"at": 1763700100.0}

    push(b, dcp(100))  # b copied again, correctly: both verified; the time is the oldest checksum's
    for kit in (a, b):
        assert copy_at(kit).verification == Verification.VERIFIED
    assert copy_at(a).verified_at.timestamp() == 1763700100.0


def test_content_that_changes_under_an_unchanged_mtime_is_corrupt_and_its_first_checksum_vouches_for_a_copy(
    two_hosts, push
):
    a, b = two_hosts
    source = dcp(100)
    for line in source:
        line["checksummed_at"] = 1763700100.0
    push(a, source)
    copied = dcp(100)
    for line in copied:
        line["mtime"], line["checksummed_at"] = 1763700500.0, 1763700600.0
    push(b, copied)
    assert copy_at(a).verification == copy_at(b).verification == Verification.VERIFIED
    # A scrub on a reads other bytes for __1_0.distcp, whose size and mtime have not changed: bit rot.
    rotted = dcp(100, **{"__1_0.distcp": "rotted"})
    for line in rotted:
        line["checksummed_at"] = 1763790000.0
    push(a, rotted)
    damaged, copy = copy_at(a), copy_at(b)
    assert (damaged.state, damaged.verification, damaged.verification_basis) == ("corrupt", "mismatch", "source")
    assert any(
        r.startswith("__1_0.distcp: its sha256 is not the one first taken at 2025-11-21 04:41 UTC")
        for r in damaged.reasons
    )
    assert (copy.state, copy.verification) == (CopyState.COMPLETE, Verification.VERIFIED)
    first = ShardFile.objects.get(location=a.location, path="llm/llama-7b/step-100/__1_0.distcp").first_checksum
    assert first == {"algo": "sha256", "digest": sha("rank 1"), "at": 1763700100.0}
    push(a, rotted)  # the same report again changes nothing and forgets nothing
    assert copy_at(a).verification == Verification.MISMATCH


def test_a_verdict_changed_by_another_locations_inventory_moves_this_locations_spend_rows_at_once(two_hosts, push):
    from spend.models import UsageDaily

    a, b = two_hosts
    copied = dcp(100, **{"__1_0.distcp": "one flipped byte"})
    for line in copied:
        line["mtime"], line["checksummed_at"] = 1763700500.0, 1763700600.0
    push(b, copied)  # alone: complete, and its bytes are counted complete

    def states(kit):
        return dict(UsageDaily.objects.filter(location=kit.location).values_list("state", "bytes"))

    assert set(states(b)) == {"complete"}
    source = dcp(100)
    for line in source:
        line["checksummed_at"] = 1763700100.0  # taken before b's copy was written
    push(a, source)  # only a reports: b is found corrupt, and b's rows say so without b reporting again
    assert copy_at(b).state == CopyState.COMPLETE  # disputed: nothing says b was copied from a
    # The product's record that it made b from a (a move, an offload) is what lets a's checksum settle it; a's
    # next inventory (a file touched) re-judges the checkpoint, and b's rows follow without b reporting again.
    CheckpointCopy.objects.filter(pk=copy_at(b).pk).update(
        made_from=copy_at(a), made_at=datetime.fromtimestamp(1763700400.0, UTC), made_by="offload #1"
    )
    source[0]["mtime"] += 1
    push(a, source)
    assert copy_at(b).state == CopyState.CORRUPT
    assert set(states(b)) == {"corrupt"}
    assert states(b)["corrupt"] == 900 + 2 * 4096


def test_when_the_only_other_copy_goes_the_remaining_one_is_no_longer_verified(two_hosts, push):
    a, b = two_hosts
    push(a, dcp(100))
    push(b, dcp(100))
    assert copy_at(a).verification == Verification.VERIFIED
    push(b, dcp(200))  # step 100 has gone from b
    assert copy_at(a).verification == Verification.UNVERIFIED
    assert copy_at(a).verification_reasons == [LONE]


def test_verification_is_idempotent_and_an_unchanged_inventory_rewrites_no_copy(two_hosts, push):
    a, b = two_hosts
    push(a, dcp(100) + dcp(200))
    push(b, dcp(100, **{"__0_0.distcp": "flipped"}) + dcp(200))
    before = list(CheckpointCopy.objects.order_by("pk").values())
    ids = list(CheckpointCopy.objects.values_list("checkpoint_id", flat=True))
    assert checkpoints_verify(ids) == 0
    # A file changed at b (its mtime) makes its run directory be judged again, mismatch and all.
    changed = dcp(100, **{"__0_0.distcp": "flipped"}) + dcp(200)
    changed[1]["mtime"] += 1
    with CaptureQueriesContext(connection) as ctx:
        push(b, changed)
    copy_writes = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith('UPDATE "catalog_checkpointcopy"')]
    assert copy_writes == []
    assert list(CheckpointCopy.objects.order_by("pk").values()) == before


def test_a_copy_without_checksums_is_unverified_and_says_so(two_hosts, push):
    a, b = two_hosts
    push(a, dcp(100))
    push(b, dcp(100, checksums=False))
    bare = copy_at(b)
    assert (bare.state, bare.verification) == (CopyState.COMPLETE, Verification.UNVERIFIED)
    assert bare.verification_reasons == ["3 of 3 files have no content checksum"]
    assert copy_at(a).verification == Verification.UNVERIFIED
    assert copy_at(a).verification_reasons == [
        "no reference for 3 of 3 files: no other copy or writer's manifest has a comparable checksum"
    ]


def test_a_sidecar_with_checksums_verifies_a_single_copy(make_host, push):
    kit = make_host()
    files = dcp(100)
    base = "llm/llama-7b/step-100"
    records = [{"path": f["path"][len(base) + 1 :], "size": f["size"], "sha256": f["sha256"]} for f in files]
    content = {"schema": "ckptfleet/1", "run": "llama-7b", "team": "llm", "step": 100, "files": records}
    sidecar = {"path": f"{base}/ckptfleet.json", "size": 700, "mtime": 1763700001.0}
    push(kit, [*files, {**sidecar, "facts": {"kind": "json", "content": content}}])
    copy = copy_at(kit)
    assert copy.reference_checksums[".metadata"] == ["sha256", sha("metadata")]
    assert (copy.state, copy.verification) == (CopyState.COMPLETE, Verification.VERIFIED)
    assert copy.verification_reasons == ["all 3 files agree with the writer's manifest"]


def test_incomparable_checksums_leave_copies_unverified(two_hosts, push):
    a, b = two_hosts
    push(a, dcp(100))
    push(b, dcp(100))
    # As a bucket scan would record them: S3's composite checksum of a multipart upload.
    ShardFile.objects.filter(location=b.location).update(checksum="Zm9vYmFy-3", checksum_algo="sha256-composite")
    checkpoint_id = copy_at(a).checkpoint_id
    assert checkpoints_verify([checkpoint_id]) == 2
    assert copy_at(b).verification == Verification.UNVERIFIED
    assert copy_at(b).verification_reasons == [
        "checksums not comparable: 3 of 3 files have sha256-composite here, the references sha256"
    ]
    assert copy_at(a).verification == Verification.UNVERIFIED
    assert copy_at(a).state == copy_at(b).state == CopyState.COMPLETE


def test_the_pages_and_api_show_verification_and_failure_domains(two_hosts, push, signed_in):
    a, b = two_hosts
    push(a, dcp(100))
    push(b, dcp(100))
    copy = copy_at(a)
    run_page = signed_in.get(f"/runs/{copy.checkpoint.run_id}/").content.decode()
    assert "2 verified copies in 2 failure domains" in run_page
    page = signed_in.get(f"/checkpoints/{copy.checkpoint_id}/").content.decode()
    assert "2 verified copies in 2 failure domains" in page
    assert "host gpu-a01, host gpu-b01" in page
    assert f"all 3 files agree with the copy at {b.location.name}" in page
    body = signed_in.get(f"/api/v1/checkpoints/{copy.checkpoint_id}/").json()
    assert body["verified_copies"] == 2
    assert body["failure_domains"] == ["host gpu-a01", "host gpu-b01"]
    assert {c["failure_domain"] for c in body["copies"]} == {"host gpu-a01", "host gpu-b01"}
    assert body["copies"][0]["verification_reasons"]


def test_a_mismatch_shows_its_reason_on_the_run_page(two_hosts, push, signed_in):
    a, b = two_hosts
    push(a, dcp(100))
    push(b, dcp(100, **{"__1_0.distcp": "flipped"}))
    html = signed_in.get(f"/runs/{copy_at(a).checkpoint.run_id}/").content.decode()
    assert "__1_0.distcp: sha256 differs from the copy at" in html
    assert "no verified copy" in html


@pytest.mark.django_db
def test_a_failure_domain_is_the_host_or_a_buckets_region():
    host = Host.objects.create(name="gpu-a01", site="dc1", region="eu-west")
    nvme = StorageLocation(name="gpu-a01:/mnt", kind="nvme", tier="nvme", host=host, root_path="/mnt")
    bucket = StorageLocation(name="s3-ckpt", kind="bucket", tier="object_standard", region="us-east-1")
    unknown = StorageLocation(name="minio", kind="bucket", tier="object_standard")
    assert failure_domain(nvme) == "host gpu-a01"
    assert failure_domain(bucket) == "region us-east-1"
    assert failure_domain(unknown) == "location minio"


class TestPlainAgreementShortcut:
    """The set-based shortcut for plain files gives exactly the verdicts of judging every file one by one."""

    @staticmethod
    def one_by_one(copies):
        import catalog.verification as verification

        original = verification._plain_agreement
        verification._plain_agreement = lambda cs: {c.id: {} for c in cs}
        try:
            return judge(copies)
        finally:
            verification._plain_agreement = original

    @given(
        data=st.lists(
            st.tuples(
                st.sampled_from([CopyState.COMPLETE, CopyState.COMPLETE, CopyState.PARTIAL]),
                st.booleans(),  # temporary
                st.dictionaries(
                    st.sampled_from(["a.bin", "b.bin", "c.bin", "d.bin"]),
                    st.one_of(
                        st.none(),
                        st.sampled_from(["x", "y"]).map(lambda v: ("sha256", sha(v))),
                        st.just(("md5", "9b2cf535f27731c974343645a3985328-16")),
                        st.just(("crc32", "0a0b0c0d")),
                    ),
                    max_size=4,
                ),
                st.booleans(),  # a manifest for a.bin
            ),
            min_size=1,
            max_size=4,
        )
    )
    @hsettings(max_examples=200, deadline=None)
    def test_it_agrees_with_judging_each_file(self, data):
        copies = []
        for i, (state, temporary, files, manifest) in enumerate(data, start=1):
            facts = {rel: FileFacts(4096, *(value or ("", ""))) for rel, value in files.items()}
            copies.append(
                copy(
                    i,
                    f"loc-{i}",
                    facts,
                    state=state,
                    temporary=temporary and i > 1,
                    manifest={"a.bin": ["sha256", sha("x")]} if manifest else {},
                )
            )
        assert judge(copies) == self.one_by_one(copies)


class TestSamePrintShortcut:
    """Copies with the same content print get from their prints alone exactly the verdicts judge gives."""

    @given(
        data=st.lists(
            st.tuples(
                st.sampled_from([CopyState.COMPLETE, CopyState.COMPLETE, CopyState.PARTIAL]),
                st.booleans(),  # temporary
                st.booleans(),  # the same files as the first copy
                st.dictionaries(
                    st.sampled_from(["a.bin", "b.bin", "c.bin"]),
                    st.one_of(
                        st.none(),
                        st.sampled_from(["x", "y"]).map(lambda v: ("sha256", sha(v))),
                        st.just(("crc32", "0a0b0c0d")),
                    ),
                    max_size=3,
                ),
                st.booleans(),  # read now, or its stored print stands for it
            ),
            min_size=1,
            max_size=4,
        ),
        where=st.sampled_from(["gpu-a01:/mnt/nvme0", "s3-ckpt"]),
    )
    @hsettings(max_examples=300, deadline=None)
    def test_it_gives_what_judging_the_files_gives(self, data, where):
        from types import SimpleNamespace

        from catalog.verification import _same_print_verdicts

        first = None
        rows, evidence, bases, borrowed, prints = [], [], {}, {}, {}
        for i, (state, temporary, same, files, read) in enumerate(data, start=1):
            facts = {rel: FileFacts(4096, *(value or ("", ""))) for rel, value in files.items()}
            if first is None:
                first = facts
            elif same:
                facts = dict(first)
            stored = content_print(facts)
            rows.append(SimpleNamespace(pk=i, content_print=stored))
            evidence.append(copy(i, f"{where}-{i}", facts, state=state, temporary=temporary and i > 1))
            bases[i] = (state, [])
            if read:
                prints[i] = stored
            else:
                borrowed[i] = facts
        shortcut = _same_print_verdicts(rows, evidence, bases, borrowed, prints)
        if shortcut is not None:
            assert shortcut == judge(evidence)

    def test_it_decides_three_agreeing_copies_and_leaves_the_rest_to_judge(self):
        from types import SimpleNamespace

        from catalog.verification import _same_print_verdicts

        files = shards()
        evidence = [copy(i, f"loc-{i}", dict(files)) for i in (1, 2, 3)]
        rows = [SimpleNamespace(pk=i, content_print=content_print(files)) for i in (1, 2, 3)]
        bases = {i: (CopyState.COMPLETE, []) for i in (1, 2, 3)}
        prints = {1: content_print(files)}
        borrowed = {2: files, 3: files}
        shortcut = _same_print_verdicts(rows, evidence, bases, borrowed, prints)
        assert shortcut == judge(evidence)
        assert shortcut[1].reasons == ["all 2 files agree with the copy at loc-2 and the copy at loc-3"]
        rows[2].content_print = ""  # a copy whose print is unknown: its files decide
        assert _same_print_verdicts(rows, evidence, bases, borrowed, prints) is None


def test_a_second_copy_with_the_same_content_is_verified_without_reading_the_first_ones_files_back(
    two_hosts, push, monkeypatch
):
    import catalog.verification as verification

    a, b = two_hosts
    source = dcp(100)
    for line in source:
        line["checksummed_at"] = 1763700100.0
    push(a, source)
    first = copy_at(a)
    assert first.content_print and first.checksums_at.timestamp() == 1763700100.0
    read: list[int] = []
    member_files = verification._member_files
    monkeypatch.setattr(verification, "_member_files", lambda ids: read.extend(ids) or member_files(ids))
    copied = dcp(100)
    for line in copied:
        line["mtime"], line["checksummed_at"] = 1763700500.0, 1763700600.0
    push(b, copied)
    assert first.pk not in read
    for kit, other, taken in ((a, b, 1763700100.0), (b, a, 1763700600.0)):
        copy = copy_at(kit)
        assert (copy.verification, copy.verification_basis) == (Verification.VERIFIED, "peers")
        assert copy.verification_reasons == [f"all 3 files agree with the copy at {other.location.name}"]
        assert copy.verified_at.timestamp() == taken  # each copy's own checksums' time, read or not
    # A flipped file is another content: the first copy's files are read again and the flip is judged.
    monkeypatch.setattr(verification, "_member_files", member_files)
    flipped = dcp(100, **{"__1_0.distcp": "flipped"})
    for line in flipped:
        line["mtime"], line["checksummed_at"] = 1763700900.0, 1763701000.0
    push(b, flipped)
    assert copy_at(a).verification == copy_at(b).verification == Verification.DISPUTED


def test_a_torch_zip_whose_member_crcs_the_agent_checked_settles_a_disagreement_through_ingestion(two_hosts, push):
    a, b = two_hosts
    checked = {"kind": "torch_file", "container": "zip", "complete": True, "members_checked": 3, "members_bad": []}
    line = {"path": "vision/vit/epoch=1-step=200.ckpt", "size": 4096, "mtime": 1763700000.0}
    push(a, [{**line, "sha256": sha("good"), "facts": checked}])
    push(b, [{**line, "sha256": sha("bad"), "facts": {k: v for k, v in checked.items() if "members" not in k}}])
    good = CheckpointCopy.objects.get(location=a.location, gone_at__isnull=True)
    bad = CheckpointCopy.objects.get(location=b.location, gone_at__isnull=True)
    assert (bad.state, bad.verification, bad.verification_basis) == ("corrupt", "mismatch", "format")
    assert (good.verification, good.verification_basis) == ("verified", "format")
