"""What S3 stores against what the agent computes: full CRCs, composites rebuilt from block CRCs, bad lines refused."""

from __future__ import annotations

import base64
import hashlib
import zlib

import pytest
from awscrt import checksums as crt
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import digests
from catalog.digests import MIB, compare, composite_of, from_line, full_from_blocks, why_not_comparable


def block_crcs(data: bytes, algo: str = "crc32", block: int = MIB) -> str:
    width = digests.CRC_WIDTH[algo]
    raw = b"".join(digests.crc(algo, data[i : i + block]).to_bytes(width, "big") for i in range(0, len(data), block))
    return base64.b64encode(raw).decode()


def s3_composite(data: bytes, part: int, algo: str = "crc32") -> str:
    """What S3 computes for a multipart upload (AWS, "Checking object integrity": checksum of the part checksums)."""
    width = digests.CRC_WIDTH[algo]
    parts = b"".join(digests.crc(algo, data[i : i + part]).to_bytes(width, "big") for i in range(0, len(data), part))
    return digests.crc(algo, parts).to_bytes(width, "big").hex()


def host(data: bytes, algos=("crc32",)) -> dict:
    return {"blocks": {"size": MIB, **{a: block_crcs(data, a) for a in algos}}}


DATA = bytes(range(256)) * (20 * 4096) + b"tail of the file"  # 20 MiB + 16 B: three 8 MiB parts


class TestComposites:
    def test_a_boto3_multipart_composite_is_rebuilt_from_the_agents_block_crcs(self):
        blocks = digests.block_crcs(host(DATA), "crc32")
        assert composite_of("crc32", blocks, len(DATA), 8 * MIB) == s3_composite(DATA, 8 * MIB)
        assert full_from_blocks("crc32", blocks, len(DATA)) == zlib.crc32(DATA).to_bytes(4, "big").hex()

    @pytest.mark.parametrize("algo", ["crc32", "crc32c"])
    def test_a_flipped_byte_in_the_bucket_copy_changes_its_composite(self, algo):
        flipped = bytearray(DATA)
        flipped[12 * MIB + 5] ^= 0x01
        bucket = {"composite": {"algo": algo, "value": s3_composite(bytes(flipped), 8 * MIB, algo), "parts": 3}}
        bucket["composite"]["part_size"] = 8 * MIB
        outcome = compare({}, host(DATA, (algo,)), {}, bucket, len(DATA))
        assert outcome is not None and not outcome.equal
        assert outcome.algo == f"{algo} composite of 3 parts"
        good = {"composite": {**bucket["composite"], "value": s3_composite(DATA, 8 * MIB, algo)}}
        assert compare({}, host(DATA, (algo,)), {}, good, len(DATA)).equal

    def test_an_unknown_part_size_is_found_among_the_layouts_on_block_boundaries(self):
        bucket = {"composite": {"algo": "crc32", "value": s3_composite(DATA, 10 * MIB), "parts": 3, "part_size": 0}}
        assert compare({}, host(DATA), {}, bucket, len(DATA)).equal
        # No layout on block boundaries gives another value: not comparable, never condemned on a guess.
        other = {"composite": {**bucket["composite"], "value": "00000000"}}
        assert compare({}, host(DATA), {}, other, len(DATA)) is None

    def test_parts_that_do_not_fall_on_block_boundaries_cannot_be_rebuilt(self):
        blocks = digests.block_crcs(host(DATA), "crc32")
        assert composite_of("crc32", blocks, len(DATA), 5 * 1000 * 1000) is None

    def test_a_sha256_composite_says_what_to_do(self):
        bucket = {"composite": {"algo": "sha256", "value": "ab" * 32, "parts": 3, "part_size": 8 * MIB}}
        assert compare({}, host(DATA), {}, bucket, len(DATA)) is None
        assert "upload with a CRC checksum" in why_not_comparable({}, host(DATA), bucket)
        assert "--checksums" in why_not_comparable({}, {}, {"composite": {"algo": "crc32", "parts": 3}})

    @settings(max_examples=30, deadline=None)
    @given(
        size=st.integers(min_value=1, max_value=5 * MIB),
        part_mib=st.integers(min_value=1, max_value=3),
        seed=st.integers(min_value=0, max_value=255),
    )
    def test_any_layout_on_block_boundaries_matches_what_s3_computes(self, size, part_mib, seed):
        data = bytes((seed + i * 7) % 256 for i in range(min(size, 4096))) * (size // 4096 + 1)
        data = data[:size]
        blocks = digests.block_crcs(host(data, ("crc32", "crc32c")), "crc32c")
        assert composite_of("crc32c", blocks, size, part_mib * MIB) == s3_composite(data, part_mib * MIB, "crc32c")


class TestFullDigests:
    def test_the_strongest_common_algorithm_decides(self):
        sha = hashlib.sha256(DATA).hexdigest()
        crc = zlib.crc32(DATA).to_bytes(4, "big").hex()
        outcome = compare({"sha256": sha, "crc32": crc}, {}, {"sha256": sha, "crc32": "00000000"}, {}, len(DATA))
        assert outcome.algo == "sha256" and outcome.equal

    def test_a_full_crc_is_rebuilt_from_blocks_when_only_blocks_are_there(self):
        crc64 = crt.crc64nvme(DATA).to_bytes(8, "big").hex()
        assert compare({}, host(DATA), {"crc64nvme": crc64}, {}, len(DATA)) is None
        crc = zlib.crc32(DATA).to_bytes(4, "big").hex()
        assert compare({}, host(DATA), {"crc32": crc}, {}, len(DATA)).equal

    def test_a_crc_is_never_compared_with_a_sha256(self):
        sha = hashlib.sha256(DATA).hexdigest()
        assert compare({"crc32": "00000000"}, {}, {"sha256": sha}, {}, len(DATA)) is None


class TestLines:
    def test_a_line_with_every_checksum_is_stored_as_sent(self):
        stored = from_line({"crc32": "0a0b0c0d", **host(DATA)}, 1764115200.25, len(DATA))
        assert stored == {"crc32": "0a0b0c0d", "blocks": host(DATA)["blocks"], "at": 1764115200.25}
        assert digests.dumps(stored) == digests.dumps(dict(reversed(list(stored.items()))))

    @pytest.mark.parametrize(
        ("checksums", "at", "error"),
        [
            ("crc32", None, "checksums must be an object"),
            ({"crc32": "0A0B0C0D"}, None, "checksums.crc32 must be 8 lowercase hex digits"),
            ({"md4": "00"}, None, "unknown key 'md4'"),
            ({"blocks": {"size": 3 * MIB, "crc32": ""}}, None, "power-of-two number of MiB"),
            ({"blocks": {"size": MIB, "crc32": "AAAA"}}, None, "must be base64 of 21 big-endian crc32 values"),
            ({"blocks": {"size": MIB, "crc64nvme": "AAAA"}}, None, "unknown key 'crc64nvme'"),
            (None, "yesterday", "checksummed_at must be a number"),
            (None, -5, "checksummed_at is out of range"),
        ],
    )
    def test_a_malformed_line_is_refused_with_the_reason(self, checksums, at, error):
        with pytest.raises(ValueError, match=error):
            from_line(checksums, at, len(DATA))

    def test_more_than_ten_thousand_blocks_are_refused(self):
        with pytest.raises(ValueError, match="more than 10,000 blocks"):
            from_line({"blocks": {"size": MIB, "crc32": ""}}, None, 10_001 * MIB)
