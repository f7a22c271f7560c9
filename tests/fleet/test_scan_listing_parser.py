"""The scanner reads ListObjectsV2 pages without botocore's model walk (``fleet.s3._ListingParser``): same answer.

Each page the real endpoint (moto's server) returns is parsed both ways, the scanner's and botocore's
own ``RestXMLParser``, and the two answers must be the same dictionary.
"""

from __future__ import annotations

import copy

import pytest
from botocore.parsers import RestXMLParser

import fleet.s3 as s3lib

pytestmark = [pytest.mark.services]

KEYS = [
    "llm/run-a/step-100/.metadata",
    "llm/run-a/step-100/__0_0.distcp",
    "llm/run-a/step 200/model+weights.safetensors",
    "llm/run-b/ünïcödé/ckpt.pt",
    "llm/run-b/tab\there.bin",
    "root-file.json",
    "vision/x/y/z.bin",
]


@pytest.fixture
def listed(s3):
    """(list_objects_v2 kwargs) -> every raw response of that listing and the operation's output shape."""
    name = s3.bucket()
    for i, key in enumerate(KEYS):
        s3.put(name, key, b"x" * (i + 1))
    client = s3lib.make_client(endpoint_url=s3.url, region_name="us-east-1", addressing_style="path")
    shape = client.meta.service_model.operation_model("ListObjectsV2").output_shape

    def run(**kwargs) -> tuple[list[dict], list[dict]]:
        raw: list[dict] = []

        def capture(response_dict, **_):
            raw.append(copy.deepcopy(response_dict))

        client.meta.events.register("before-parse.s3.ListObjectsV2", capture)
        answers = list(client.get_paginator("list_objects_v2").paginate(Bucket=name, **kwargs))
        client.meta.events.unregister("before-parse.s3.ListObjectsV2", capture)
        return raw, answers

    return run, shape


def both(raw: dict, shape) -> tuple[dict, dict]:
    fast = s3lib._ListingParser(timestamp_parser=s3lib._timestamp).parse(copy.deepcopy(raw), shape)
    plain = RestXMLParser(timestamp_parser=s3lib._timestamp).parse(copy.deepcopy(raw), shape)
    return fast, plain


@pytest.mark.parametrize(
    "kwargs",
    [
        {"PaginationConfig": {"PageSize": 3}},
        {"Delimiter": "/"},
        {"Prefix": "llm/", "Delimiter": "/", "PaginationConfig": {"PageSize": 1}},
        {"StartAfter": "llm/run-b"},
        {"Prefix": "nothing-here/"},
    ],
    ids=["pages", "delimiter", "prefix-pages", "start-after", "empty"],
)
def test_every_page_reads_as_botocores_parser_reads_it(listed, monkeypatch, kwargs):
    run, shape = listed
    read: list[int] = []
    original = s3lib._ListingParser._list_v2

    def spy(self, root):
        out = original(self, root)
        read.append(len(out.get("Contents", ())))
        return out

    monkeypatch.setattr(s3lib._ListingParser, "_list_v2", spy)

    raw, answers = run(**kwargs)

    assert raw and len(read) == len(raw)  # every page went the fast way, none fell back
    for response in raw:
        fast, plain = both(response, shape)
        assert fast == plain
    listed_keys = [o["Key"] for a in answers for o in a.get("Contents", ())]
    if "Prefix" not in kwargs and "StartAfter" not in kwargs and "Delimiter" not in kwargs:
        assert listed_keys == sorted(KEYS)  # url-decoded after parsing, as botocore does
        assert all(o["ChecksumAlgorithm"] == ["SHA256"] for a in answers for o in a["Contents"])


def test_a_page_with_elements_it_does_not_know_is_botocores(listed, monkeypatch):
    run, shape = listed
    fell_back: list[str] = []
    original = s3lib._ListingParser._list_v2

    def spy(self, root):
        try:
            return original(self, root)
        except s3lib._Unexpected as exc:
            fell_back.append(str(exc))
            raise

    monkeypatch.setattr(s3lib._ListingParser, "_list_v2", spy)

    raw, answers = run(FetchOwner=True)

    assert fell_back == ["Owner"]
    fast, plain = both(raw[0], shape)
    assert fast == plain
    assert "Owner" in answers[0]["Contents"][0]
