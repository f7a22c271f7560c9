"""The host agent: walking a root, reading facts, caching checksums, and talking to the server.

Everything runs against real files in a temporary directory and a tiny stdlib HTTP server in a
thread; no database is needed.
"""

from __future__ import annotations

import dataclasses
import enum
import gzip
import hashlib
import io
import json
import os
import pathlib
import pickle
import shutil
import socket
import struct
import subprocess
import sys
import threading
import types
import zipfile
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dashboard.management.commands.seed_demo import DEMO_TREES as FIXTURE_TREES
from fleet import agent

TOKEN = "cfh_test_secret_token_1234"
DCP_FIXTURES = sorted(FIXTURE_TREES.glob("**/.metadata"))


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    """No server, token or proxy leaks in from the developer's shell."""
    for name in (
        "CKPTFLEET_SERVER", "CKPTFLEET_TOKEN", "CKPTFLEET_TOKEN_FILE", "CKPTFLEET_AGENT_DEBUG",
        "http_proxy", "https_proxy", "all_proxy", "no_proxy",
        "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    ):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


def write(path: Path, data: bytes | str = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def facts_of(path: Path) -> dict[str, Any] | None:
    return agent.file_facts(str(path))


class Warnings(list):
    def __call__(self, message: str) -> None:
        self.append(message)


# --- walking a root -------------------------------------------------------------------------------


def test_it_reports_regular_files_in_path_order_and_skips_symlinks_and_special_files(tmp_path):
    root = tmp_path / "root"
    for rel in ("a.txt", "a/x", "a-b", "a0", "b/c/d.dat", "Z", "nested/deeper/file"):
        write(root / rel, rel)
    (root / "empty-dir").mkdir()
    os.symlink(root / "a.txt", root / "last.ckpt")
    os.symlink(root / "a", root / "link-to-dir")
    os.symlink(tmp_path / "nowhere", root / "dangling")
    os.mkfifo(root / "fifo")
    outside = write(tmp_path / "outside" / "secret.bin", "not below the root")
    os.symlink(outside.parent, root / "escape")

    lines = list(agent.scan_root(str(root), warn=Warnings()))

    paths = [line["path"] for line in lines]
    assert paths == ["Z", "a-b", "a.txt", "a/x", "a0", "b/c/d.dat", "nested/deeper/file"]
    assert paths == sorted(paths)
    for line in lines:
        st = os.stat(root / line["path"])
        assert line["type"] == "file"
        assert line["size"] == st.st_size
        assert line["mtime"] == pytest.approx(st.st_mtime_ns / 1e9)
        assert "sha256" not in line


def test_it_skips_names_the_server_would_refuse_with_a_warning(tmp_path):
    root = tmp_path / "root"
    write(root / "good.txt", "ok")
    broot = os.fsencode(root)
    with open(os.path.join(broot, b"bad\xff.bin"), "wb") as f:
        f.write(b"x")
    os.makedirs(os.path.join(broot, b"baddir\xfe"))
    with open(os.path.join(broot, b"baddir\xfe", b"inside.txt"), "wb") as f:
        f.write(b"x")
    write(root / "tab\there", "x")
    write(root / "new\nline", "x")
    write(root / "back\\slash", "x")
    write(root / "caf\u00e9" / "ok.txt", "unicode is fine")
    warnings = Warnings()

    paths = [line["path"] for line in agent.scan_root(str(root), warn=warnings)]

    assert paths == ["caf\u00e9/ok.txt", "good.txt"]
    assert len(warnings) == 5
    text = "\n".join(warnings)
    assert "bad\\xff.bin: file skipped because its name is not valid UTF-8" in text
    assert "baddir\\xfe: directory and everything below it skipped" in text
    assert "tab\\x09here: file skipped because its name contains a control character" in text
    assert "new\\x0aline" in text
    assert "its name contains a backslash" in text
    assert all("\n" not in w for w in warnings)


def test_the_default_warning_is_one_line_on_stderr(tmp_path, capsys):
    root = tmp_path / "root"
    write(root / "new\nline", "x")
    assert list(agent.scan_root(str(root))) == []
    err = capsys.readouterr().err
    assert err.startswith("ckptfleet-agent: warning: ")
    assert err.count("\n") == 1


def test_it_skips_a_path_longer_than_the_server_accepts(tmp_path, monkeypatch):
    monkeypatch.setattr(agent.walk, "MAX_PATH_BYTES", 12)
    root = tmp_path / "root"
    write(root / "short.txt", "x")
    write(root / "a-much-longer-name.txt", "x")
    warnings = Warnings()
    assert [line["path"] for line in agent.scan_root(str(root), warn=warnings)] == ["short.txt"]
    assert "longer than 12 bytes" in warnings[0]


def test_an_unreadable_directory_is_skipped_with_a_warning(tmp_path, monkeypatch):
    root = tmp_path / "root"
    write(root / "ok" / "a.bin", "x")
    write(root / "locked" / "b.bin", "x")
    real_scandir = os.scandir

    def scandir(path):
        if os.fspath(path).endswith("locked"):
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(agent.walk.os, "scandir", scandir)
    warnings = Warnings()
    assert [line["path"] for line in agent.scan_root(str(root), warn=warnings)] == ["ok/a.bin"]
    assert "locked: directory skipped" in warnings[0]
    assert "Permission denied" in warnings[0]


def test_a_file_that_vanishes_during_the_walk_is_skipped(tmp_path):
    root = tmp_path / "root"
    write(root / "a.bin", "x")
    write(root / "b.bin", "x")
    warnings = Warnings()
    lines = agent.scan_root(str(root), warn=warnings)
    assert next(lines)["path"] == "a.bin"
    (root / "b.bin").unlink()
    assert list(lines) == []
    assert "b.bin: skipped" in warnings[0]


def test_it_walks_a_tree_deeper_than_the_recursion_limit(tmp_path):
    # Built and removed one level at a time: pathlib's mkdir(parents=True) and shutil.rmtree (which
    # cleans up tmp_path) would themselves hit the recursion limit.
    root = str(tmp_path / "root")
    levels = [root + "/d" * i for i in range(sys.getrecursionlimit() + 51)]
    for level in levels:
        os.mkdir(level)
    leaf = write(Path(levels[-1]) / "leaf.bin", "x")
    try:
        (line,) = agent.scan_root(root)
        assert line["path"] == "d/" * (len(levels) - 1) + "leaf.bin"
    finally:
        leaf.unlink()
        for level in reversed(levels):
            os.rmdir(level)


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_root_that_is_not_a_directory_is_an_error(tmp_path, kind):
    root = tmp_path / "root"
    if kind == "file":
        write(root, "x")
    with pytest.raises(agent.AgentError, match="does not exist" if kind == "missing" else "is not a directory"):
        list(agent.scan_root(str(root)))


def test_an_inventory_is_a_header_the_files_and_a_trailer_that_counts_them(tmp_path):
    root = tmp_path / "root"
    write(root / "x" / "one.bin", b"1" * 10)
    write(root / "two.bin", b"2" * 32)

    lines = list(agent.inventory_lines(str(root) + "/", "gpu-a01", started_at="2026-11-21T23:00:00Z"))

    header = dict(lines[0])
    # The file system's size and free space (os.statvfs of the root): free space moves while the test runs.
    size, free = header.pop("fs_size_bytes"), header.pop("fs_free_bytes")
    assert isinstance(size, int) and isinstance(free, int) and 0 <= free <= size
    assert header == {
        "type": "header",
        "format": "ckptfleet-inventory/1",
        "host": "gpu-a01",
        "root": str(root),
        "agent": f"ckptfleet-agent/{agent.__version__}",
        "started_at": "2026-11-21T23:00:00Z",
    }
    assert [line["path"] for line in lines[1:-1]] == ["two.bin", "x/one.bin"]
    assert lines[-1] == {"type": "end", "files": 2, "bytes": 42}


def test_facts_too_big_for_one_line_become_an_error_fact(monkeypatch):
    monkeypatch.setattr(agent.walk, "MAX_LINE_BYTES", 200)
    line = {
        "type": "file",
        "path": "x/config.json",
        "size": 1,
        "mtime": 1.0,
        "facts": {"kind": "json", "content": "y" * 500},
    }
    too_long = len(json.dumps(line, separators=(",", ":"))) + 1
    encoded = agent.encode_line(line)
    assert len(encoded) <= 200
    assert json.loads(encoded)["facts"] == {
        "kind": "json",
        "error": f"facts of {too_long} bytes exceed the line limit",
    }


def test_facts_holding_text_that_is_not_unicode_become_an_error_fact(tmp_path):
    path = write(tmp_path / "config.json", '{"name": "\\ud800"}')
    line = {"type": "file", "path": "config.json", "size": 1, "mtime": 1.0, "facts": facts_of(path)}
    assert json.loads(agent.encode_line(line))["facts"] == {
        "kind": "json",
        "error": "facts hold text that is not valid Unicode",
    }


# --- facts ----------------------------------------------------------------------------------------


def safetensors_bytes(tensors: dict[str, int], *, metadata: dict | None = None) -> bytes:
    """A safetensors file written by hand: u64 LE header length, JSON header, then the data."""
    header: dict[str, Any] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, nbytes in tensors.items():
        header[name] = {"dtype": "F32", "shape": [nbytes // 4], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the reference writer pads the header to 8 bytes
    return struct.pack("<Q", len(raw)) + raw + bytes(range(256)) * (offset // 256) + b"\0" * (offset % 256)


def test_safetensors_facts_give_the_size_the_header_promises(tmp_path):
    data = safetensors_bytes({"embed.weight": 512, "head.bias": 16}, metadata={"format": "pt"})
    path = write(tmp_path / "model-00001-of-00002.safetensors", data)
    assert facts_of(path) == {"kind": "safetensors", "expected_size": len(data), "tensors": 2}


def test_a_truncated_safetensors_file_still_reports_what_it_should_weigh(tmp_path):
    data = safetensors_bytes({"embed.weight": 512, "head.bias": 16})
    path = write(tmp_path / "model.safetensors", data[:-100])
    facts = facts_of(path)
    assert facts == {"kind": "safetensors", "expected_size": len(data), "tensors": 2}
    assert facts["expected_size"] > path.stat().st_size


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (b"\x10\x00", "shorter than the 8-byte header length"),
        (struct.pack("<Q", 500) + b'{"a": 1}', "header of 500 bytes is cut off"),
        (struct.pack("<Q", 200_000_000) + b"{}", "over the 100000000-byte limit"),
        (struct.pack("<Q", 4) + b"nope", "header is not valid JSON"),
        (struct.pack("<Q", 2) + b"[]", "header is not a JSON object"),
        (
            struct.pack("<Q", 33) + b'{"w": {"data_offsets": [8, 4]}}  ',
            "tensor 'w' has no valid data_offsets",
        ),
    ],
)
def test_a_damaged_safetensors_header_is_an_error_fact(tmp_path, content, error):
    facts = facts_of(write(tmp_path / "model.safetensors", content))
    assert facts["kind"] == "safetensors"
    assert error in facts["error"]


def test_an_index_lists_its_shards_once_each_in_order(tmp_path):
    index = {
        "metadata": {"total_size": 928},
        "weight_map": {
            "lm_head.weight": "model-00002-of-00002.safetensors",
            "embed.weight": "model-00001-of-00002.safetensors",
            "layers.0.weight": "model-00002-of-00002.safetensors",
        },
    }
    for name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        assert facts_of(write(tmp_path / name, json.dumps(index))) == {
            "kind": "hf_index",
            "total_size": 928,
            "shards": ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"],
        }


def test_an_index_without_total_size_or_weight_map(tmp_path):
    no_total = write(tmp_path / "a" / "model.safetensors.index.json", '{"weight_map": {"w": "m.safetensors"}}')
    assert facts_of(no_total) == {"kind": "hf_index", "total_size": None, "shards": ["m.safetensors"]}
    no_map = write(tmp_path / "b" / "model.safetensors.index.json", '{"metadata": {}}')
    assert facts_of(no_map) == {"kind": "hf_index", "error": "no weight_map of tensor names to shard files"}


def test_trainer_state_gives_the_global_step(tmp_path):
    path = write(tmp_path / "trainer_state.json", json.dumps({"global_step": 100, "log_history": [{"loss": 1.5}]}))
    assert facts_of(path) == {"kind": "trainer_state", "global_step": 100}
    broken = write(tmp_path / "x" / "trainer_state.json", '{"global_step": "100"}')
    assert facts_of(broken) == {"kind": "trainer_state", "error": "no integer global_step"}
    cut = write(tmp_path / "y" / "trainer_state.json", '{"global_step": 1')
    assert facts_of(cut)["error"].startswith("invalid JSON")


@pytest.mark.parametrize(
    "name", ["metadata.json", "integrity.json", "_CHECKPOINT_METADATA", "ckptfleet.json", "config.json"]
)
def test_small_json_manifests_are_sent_whole(tmp_path, name):
    content = {"sharded_backend": "torch_dist", "files": {"__0_0.distcp": "ab" * 32}, "n": [1, 2.5, None]}
    assert facts_of(write(tmp_path / name, json.dumps(content))) == {"kind": "json", "content": content}


def test_json_manifests_that_are_too_big_or_not_strict_json_are_error_facts(tmp_path):
    big = write(tmp_path / "a" / "config.json", json.dumps({"pad": "x" * (1024 * 1024)}))
    assert facts_of(big) == {
        "kind": "json",
        "error": f"file is {big.stat().st_size} bytes, over the 1 MiB read limit",
    }
    nan = write(tmp_path / "b" / "metadata.json", '{"loss": NaN}')
    assert facts_of(nan) == {"kind": "json", "error": "invalid JSON: NaN is not a number"}
    garbage = write(tmp_path / "c" / "ckptfleet.json", b"\xff\xfe")
    assert facts_of(garbage) == {"kind": "json", "error": "not UTF-8 text"}


def test_tracker_files_give_their_first_256_bytes_stripped(tmp_path):
    assert facts_of(write(tmp_path / "latest", "global_step200\n")) == {
        "kind": "text",
        "content": "global_step200",
    }
    long = write(tmp_path / "a" / "latest_checkpointed_iteration.txt", " " + "9" * 400)
    assert facts_of(long) == {"kind": "text", "content": "9" * 255}
    assert facts_of(write(tmp_path / "commit_success.txt", "")) == {"kind": "text", "content": ""}
    zeroed = write(tmp_path / "b" / "latest", b"\0" * 14)
    assert facts_of(zeroed) == {"kind": "text", "error": "file contains NUL bytes"}


def torch_zip_bytes(tmp_path: Path, *, comment: bytes = b"") -> bytes:
    """A zip laid out like torch.save's: an archive folder with data.pkl and storages."""
    path = tmp_path / "made.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"step": 100}))
        zf.writestr("archive/data/0", os.urandom(70_000))
        zf.writestr("archive/version", "3\n")
        zf.comment = comment
    data = path.read_bytes()
    path.unlink()
    return data


def test_a_complete_torch_zip_is_complete(tmp_path):
    for name, comment in (
        ("optimizer.pt", b""),
        ("rng_state.pth", b"a comment"),
        ("epoch=0-step=1.ckpt", b""),
    ):
        path = write(tmp_path / name, torch_zip_bytes(tmp_path, comment=comment))
        assert facts_of(path) == {"kind": "torch_file", "container": "zip", "complete": True}, name


@pytest.mark.parametrize("cut", [1, 22, 5000, 60_000])
def test_a_truncated_torch_zip_is_not_complete(tmp_path, cut):
    data = torch_zip_bytes(tmp_path)
    path = write(tmp_path / "model_optim_rng.pt", data[:-cut])
    assert facts_of(path) == {"kind": "torch_file", "container": "zip", "complete": False}


def test_an_end_record_signature_inside_tensor_data_does_not_make_a_zip_complete(tmp_path):
    data = torch_zip_bytes(tmp_path)
    cut = data[: len(data) // 2]
    stray = b"PK\x05\x06" + b"\x00" * 8 + struct.pack("<IIH", 0, 0, 0)
    path = write(tmp_path / "training_args.bin", cut + stray + os.urandom(100))
    assert facts_of(path)["complete"] is False


def zip64_tail(*, locator: bool) -> bytes:
    record = b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, 1, 1, 80, 16)
    loc = b"PK\x06\x07" + struct.pack("<IQI", 0, 100, 1) if locator else b""
    end = b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return b"PK\x03\x04" + b"\0" * 96 + record + loc + end


def test_a_zip64_end_record_needs_its_locator(tmp_path):
    assert facts_of(write(tmp_path / "a" / "big.pt", zip64_tail(locator=True)))["complete"] is True
    assert facts_of(write(tmp_path / "b" / "big.pt", zip64_tail(locator=False)))["complete"] is False


def test_pickle_and_unknown_torch_files(tmp_path):
    data = pickle.dumps({"weights": list(range(100))}, protocol=2)
    assert facts_of(write(tmp_path / "a.pt", data)) == {
        "kind": "torch_file",
        "container": "pickle",
        "complete": True,
    }
    assert facts_of(write(tmp_path / "b.pt", data[:-5])) == {
        "kind": "torch_file",
        "container": "pickle",
        "complete": False,
    }
    # Legacy torch.save: the pickled magic number, then pickles, then raw storages.
    legacy = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2) + os.urandom(64)
    assert facts_of(write(tmp_path / "c.pt", legacy)) == {
        "kind": "torch_file",
        "container": "pickle",
        "complete": None,
    }
    assert facts_of(write(tmp_path / "d.bin", b"GGUF....")) == {
        "kind": "torch_file",
        "container": "unknown",
        "complete": None,
    }
    assert facts_of(write(tmp_path / "e.ckpt", b""))["container"] == "unknown"


def test_files_that_need_no_facts_get_none(tmp_path):
    for name in ("__0_0.distcp", ".metadata.tmp", "zero_to_fp32.py", "manifest.ocdbt", "notes.txt"):
        assert facts_of(write(tmp_path / name, "x")) is None


def test_facts_never_follow_a_symlink_or_block_on_a_fifo(tmp_path):
    target = write(tmp_path / "real", "global_step1")
    os.symlink(target, tmp_path / "latest")
    assert facts_of(tmp_path / "latest")["error"].startswith("cannot read:")
    os.mkfifo(tmp_path / "commit_success.txt")
    assert facts_of(tmp_path / "commit_success.txt") == {"kind": "text", "error": "not a regular file"}


# --- DCP metadata ---------------------------------------------------------------------------------


def fake_torch(monkeypatch, variant: str) -> types.SimpleNamespace:
    """Classes laid out like torch's DCP metadata, registered under torch's module names.

    Pickling them writes the same globals and states that torch writes, without torch installed.
    ``variant`` changes how _StorageInfo pickles its state: a dict (torch's own __getstate__), a
    (None, slots) pair (a slots dataclass), or a bare list (a frozen slots dataclass on 3.11).
    """
    modules = {
        name: types.ModuleType(name)
        for name in (
            "torch", "torch.distributed", "torch.distributed.checkpoint",
            "torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem",
        )
    }  # fmt: skip
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)

    def register(module: str, cls):
        cls.__module__ = module
        cls.__qualname__ = cls.__name__
        setattr(modules[module], cls.__name__, cls)
        return cls

    class Size(tuple):
        def __reduce__(self):
            return (Size, (tuple(self),))

    register("torch", Size)

    class dtype:
        def __init__(self, name: str) -> None:
            self.name = name

        def __reduce__(self):
            return self.name

    register("torch", dtype)
    modules["torch"].float32 = dtype("float32")
    meta = "torch.distributed.checkpoint.metadata"

    class _MEM_FORMAT_ENCODING(enum.Enum):
        TORCH_CONTIGUOUS_FORMAT = 0

    register(meta, _MEM_FORMAT_ENCODING)

    @dataclasses.dataclass
    class TensorProperties:
        dtype: Any

        def __getstate__(self):
            return (self.dtype, None, False, _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT, False)

    @dataclasses.dataclass
    class ChunkStorageMetadata:
        offsets: Any
        sizes: Any

    @dataclasses.dataclass
    class TensorStorageMetadata:
        properties: Any
        size: Any
        chunks: list

    @dataclasses.dataclass
    class BytesStorageMetadata:
        pass

    @dataclasses.dataclass
    class StorageMeta:
        checkpoint_id: Any = None
        save_id: str | None = None

    @dataclasses.dataclass(frozen=True)
    class MetadataIndex:
        fqn: str
        offset: Any = None
        index: int | None = None

    @dataclasses.dataclass
    class Metadata:
        state_dict_metadata: dict
        planner_data: Any = None
        storage_data: Any = None
        storage_meta: Any = None
        version: str | None = None

    if variant == "dict":

        @dataclasses.dataclass
        class _StorageInfo:
            relative_path: str
            offset: int
            length: int
            transform_descriptors: Any = None

            def __getstate__(self):
                return {k: v for k, v in self.__dict__.items() if v is not None}

    elif variant == "slots":

        @dataclasses.dataclass(slots=True)
        class _StorageInfo:
            relative_path: str
            offset: int
            length: int

    else:

        @dataclasses.dataclass(slots=True, frozen=True)
        class _StorageInfo:
            relative_path: str
            offset: int
            length: int

    for cls in (
        TensorProperties,
        ChunkStorageMetadata,
        TensorStorageMetadata,
        BytesStorageMetadata,
        StorageMeta,
    ):
        register(meta, cls)
    register(meta, MetadataIndex)
    register(meta, Metadata)
    register("torch.distributed.checkpoint.filesystem", _StorageInfo)
    return types.SimpleNamespace(
        Size=Size,
        float32=modules["torch"].float32,
        Metadata=Metadata,
        MetadataIndex=MetadataIndex,
        StorageInfo=_StorageInfo,
        StorageMeta=StorageMeta,
        TensorStorageMetadata=TensorStorageMetadata,
        TensorProperties=TensorProperties,
        ChunkStorageMetadata=ChunkStorageMetadata,
        BytesStorageMetadata=BytesStorageMetadata,
    )


def dcp_metadata_bytes(t: types.SimpleNamespace) -> bytes:
    chunk = t.ChunkStorageMetadata(t.Size([0, 0]), t.Size([4, 4]))
    metadata = t.Metadata(
        state_dict_metadata={
            "model.w": t.TensorStorageMetadata(t.TensorProperties(t.float32), t.Size([8, 4]), [chunk]),
            "step": t.BytesStorageMetadata(),
        },
        planner_data={"model.w": ("model", "w"), "step": ("step",)},
        storage_data={
            t.MetadataIndex("model.w", t.Size([0, 0]), 0): t.StorageInfo("__0_0.distcp", 0, 100),
            t.MetadataIndex("model.w", t.Size([4, 0]), 1): t.StorageInfo("__1_0.distcp", 0, 120),
            t.MetadataIndex("model.b", t.Size([0]), 0): t.StorageInfo("__0_0.distcp", 100, 28),
            t.MetadataIndex("step"): t.StorageInfo("__0_0.distcp", 128, 9),
        },
        storage_meta=t.StorageMeta(checkpoint_id=pathlib.PurePosixPath("/mnt/ckpt/step-100"), save_id="abc"),
        version="1.0.0",
    )
    return pickle.dumps(metadata)


@pytest.mark.parametrize("variant", ["dict", "slots", "frozen_slots"])
def test_dcp_metadata_names_every_shard_with_its_least_size(tmp_path, monkeypatch, variant):
    data = dcp_metadata_bytes(fake_torch(monkeypatch, variant))
    for name in (".metadata", "__3.metadata"):
        assert facts_of(write(tmp_path / name, data)) == {
            "kind": "dcp_metadata",
            "files": {"__0_0.distcp": 137, "__1_0.distcp": 120},
        }


def test_a_truncated_or_empty_dcp_metadata_is_an_error_fact(tmp_path, monkeypatch):
    data = dcp_metadata_bytes(fake_torch(monkeypatch, "dict"))
    cut = facts_of(write(tmp_path / "a" / ".metadata", data[: len(data) // 2]))
    assert cut["kind"] == "dcp_metadata"
    assert cut["error"].startswith("cannot unpickle")
    assert facts_of(write(tmp_path / "b" / ".metadata", b"")) == {
        "kind": "dcp_metadata",
        "error": "file is empty",
    }
    assert facts_of(write(tmp_path / "c" / ".metadata", pickle.dumps({"not": "metadata"}))) == {
        "kind": "dcp_metadata",
        "error": "dict has no storage_data",
    }


def test_the_committed_trees_hold_real_dcp_metadata():
    assert len(DCP_FIXTURES) >= 3, f"no DCP .metadata under {FIXTURE_TREES} (demo/make_trees.py writes them)"


@pytest.mark.parametrize("path", DCP_FIXTURES, ids=lambda p: str(p.relative_to(FIXTURE_TREES)))
def test_real_dcp_metadata_written_by_torch(path):
    facts = facts_of(path)
    assert facts["kind"] == "dcp_metadata", facts
    assert facts["files"], facts
    for name, least in facts["files"].items():
        shard = path.parent / name
        # torch_save format: every shard is exactly as long as its last item ends.
        assert shard.stat().st_size == least, name


def test_unpickling_allows_only_stubs_and_plain_containers():
    data = pickle.dumps(
        {"od": OrderedDict(a=1), "set": {1, 2}, "frozen": frozenset({3}), "slice": slice(1, 5, 2), "c": 1j},
        protocol=2,
    )
    loaded = agent.facts._RestrictedUnpickler(io.BytesIO(data)).load()
    assert loaded == {
        "od": OrderedDict(a=1),
        "set": {1, 2},
        "frozen": frozenset({3}),
        "slice": slice(1, 5, 2),
        "c": 1j,
    }
    stub = agent.facts._RestrictedUnpickler(io.BytesIO(b"ctorch.nn\nModule\n(I1\nI2\ntR.")).load()
    assert isinstance(stub, agent.facts._Stub)
    assert stub._ckpt_args == (1, 2)


class _Hostile:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda marker: b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.", id="os.system"),
        pytest.param(
            lambda marker: pickle.dumps(_Hostile(subprocess.check_call, ["touch", str(marker)])),
            id="subprocess",
        ),
        pytest.param(lambda marker: pickle.dumps(_Hostile(eval, f"open({str(marker)!r}, 'w')")), id="eval"),
        pytest.param(lambda marker: b"cbuiltins\ngetattr\n(cos\nsystem\nS'x'\ntR.", id="getattr"),
    ],
)
def test_a_hostile_dcp_metadata_is_refused_without_running_anything(tmp_path, make, monkeypatch):
    marker = tmp_path / "pwned"
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a))
    path = write(tmp_path / "step-1" / ".metadata", make(marker))

    facts = facts_of(path)

    assert facts["kind"] == "dcp_metadata"
    assert "refused to load global" in facts["error"]
    assert not marker.exists()
    assert calls == []


# --- checksums ------------------------------------------------------------------------------------


@pytest.fixture
def counted_hashing(monkeypatch):
    """Every call of the hash function, with the inode it hashed."""
    hashed: list[int] = []
    real = agent.checksum_file

    def checksum_file(f, size, **kwargs):
        hashed.append(os.fstat(f.fileno()).st_ino)
        return real(f, size, **kwargs)

    monkeypatch.setattr(agent.cache, "checksum_file", checksum_file)
    return hashed


def test_checksums_are_the_sha256_of_the_content(tmp_path):
    root = tmp_path / "root"
    big = os.urandom(int(2.5 * 1024 * 1024))  # crosses the 1 MiB block boundaries
    write(root / "big.distcp", big)
    write(root / "empty", b"")
    lines = {line["path"]: line for line in agent.scan_root(str(root), checksums=True)}
    assert lines["big.distcp"]["sha256"] == hashlib.sha256(big).hexdigest()
    assert lines["empty"]["sha256"] == hashlib.sha256(b"").hexdigest()


def test_an_unchanged_file_is_never_hashed_twice(tmp_path, counted_hashing):
    root = tmp_path / "root"
    write(root / "a.distcp", "aaa")
    write(root / "b.distcp", "bbb")
    cache_path = str(tmp_path / "cache" / "checksums.sqlite3")

    with agent.ChecksumCache(cache_path) as cache:
        first = list(agent.scan_root(str(root), checksums=True, cache=cache))
        assert len(counted_hashing) == 2
        second = list(agent.scan_root(str(root), checksums=True, cache=cache))
        assert len(counted_hashing) == 2
    assert first == second

    # A new run (a new process) reads the same cache file.
    with agent.ChecksumCache(cache_path) as cache:
        assert list(agent.scan_root(str(root), checksums=True, cache=cache)) == first
    assert len(counted_hashing) == 2

    # A changed file is hashed again, and only that one.
    write(root / "b.distcp", "BBB!")
    with agent.ChecksumCache(cache_path) as cache:
        lines = {line["path"]: line for line in agent.scan_root(str(root), checksums=True, cache=cache)}
    assert lines["b.distcp"]["sha256"] == hashlib.sha256(b"BBB!").hexdigest()
    assert len(counted_hashing) == 3


def test_a_file_that_changes_while_it_is_hashed_gets_no_checksum(tmp_path, monkeypatch):
    root = tmp_path / "root"
    path = write(root / "growing.distcp", "abc")
    real = agent.checksum_file

    def checksum_file(f, size, **kwargs):
        sums = real(f, size, **kwargs)
        with open(path, "ab") as out:
            out.write(b"more")
        return sums

    monkeypatch.setattr(agent.cache, "checksum_file", checksum_file)
    warnings = Warnings()
    cache = agent.ChecksumCache(str(tmp_path / "c.sqlite3"))
    (line,) = agent.scan_root(str(root), checksums=True, cache=cache, warn=warnings)
    cache.close()
    assert "sha256" not in line
    assert "checksums" not in line
    assert "checksummed_at" not in line
    assert "changed while it was read" in warnings[0]


def test_a_cache_that_cannot_be_opened_is_one_clear_error(tmp_path):
    bad = write(tmp_path / "not-a-db.sqlite3", b"this is not SQLite" * 100)
    with pytest.raises(agent.AgentError, match="cannot use checksum cache"):
        agent.ChecksumCache(str(bad))


# --- the command line, against a tiny HTTP server -------------------------------------------------


@dataclasses.dataclass
class Seen:
    method: str
    path: str
    headers: Any
    body: bytes


class FakeServer:
    """Records each request and answers from a queue of (status, body, content type)."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.answers: list[tuple[int, bytes, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle_one(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.requests.append(Seen(self.command, self.path, self.headers, body))
                status, payload, ctype = server.answers.pop(0) if server.answers else (500, b"{}", "text/plain")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = handle_one

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def answer(self, status: int, doc: Any = None, *, raw: bytes | None = None, ctype: str = "application/json"):
        self.answers.append((status, raw if raw is not None else json.dumps(doc).encode(), ctype))

    def accepted(self, inventory_id: int = 17) -> None:
        self.answer(202, {"id": inventory_id, "status": "received", "url": f"/api/v1/inventories/{inventory_id}/"})

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    fake = FakeServer()
    yield fake
    fake.close()


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "mnt" / "nvme0" / "ckpt"
    write(root / "llama" / "step-100" / "__0_0.distcp", b"\1" * 1000)
    write(root / "llama" / "latest", "step-100\n")
    return root


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = agent.main(list(args))
    out, err = capsys.readouterr()
    assert TOKEN not in out
    assert TOKEN not in err
    assert "Traceback" not in err
    return code, out, err


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ckptfleet-agent: "), err
    return lines[0]


def ndjson(body: bytes) -> list[dict[str, Any]]:
    text = body.decode("utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_dry_run_prints_the_inventory_and_contacts_nobody(tree, capsys):
    code, out, err = run(capsys, "--dry-run", "--root", str(tree), "--host", "gpu-a01")
    assert code == 0, err
    assert err == ""
    lines = ndjson(out.encode())
    assert lines[0]["type"] == "header"
    assert lines[0]["host"] == "gpu-a01"
    assert lines[0]["root"] == str(tree)
    assert lines[0]["format"] == "ckptfleet-inventory/1"
    assert lines[1:-1] == [
        {"type": "file", "path": "llama/latest", "size": 9, "mtime": lines[1]["mtime"],
         "facts": {"kind": "text", "content": "step-100"}},
        {"type": "file", "path": "llama/step-100/__0_0.distcp", "size": 1000, "mtime": lines[2]["mtime"]},
    ]  # fmt: skip
    assert lines[-1] == {"type": "end", "files": 2, "bytes": 1009}


def test_dry_run_with_checksums_and_two_roots(tree, tmp_path, capsys):
    other = tmp_path / "other"
    write(other / "x.bin", "x")
    code, out, err = run(
        capsys,
        "--dry-run",
        "--checksums",
        "--cache",
        str(tmp_path / "c.sqlite3"),
        "--root",
        str(tree),
        "--root",
        str(other),
    )
    assert code == 0, err
    lines = ndjson(out.encode())
    assert [line["type"] for line in lines] == ["header", "file", "file", "end", "header", "file", "end"]
    assert lines[0]["host"] == socket.gethostname()
    assert lines[5]["sha256"] == hashlib.sha256(b"x").hexdigest()


def test_it_uploads_gzip_ndjson_with_the_token_and_reports_the_inventory(tree, server, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    server.accepted(17)

    code, out, err = run(capsys, "--server", server.url + "/", "--root", str(tree), "--host", "gpu-a01")

    assert code == 0, err
    assert out == f"gpu-a01:{tree}: 2 files, 1009 B sent as inventory 17 (received)\n"
    (request,) = server.requests
    assert request.method == "POST"
    assert request.path == "/api/v1/inventories/"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["Content-Type"] == "application/x-ndjson"
    assert request.headers["Content-Encoding"] == "gzip"
    assert request.headers["User-Agent"] == f"ckptfleet-agent/{agent.__version__}"
    assert int(request.headers["Content-Length"]) == len(request.body)
    lines = ndjson(gzip.decompress(request.body))
    assert lines[0]["type"] == "header"
    assert (lines[0]["host"], lines[0]["root"]) == ("gpu-a01", str(tree))
    assert [line["path"] for line in lines[1:-1]] == ["llama/latest", "llama/step-100/__0_0.distcp"]
    assert lines[-1] == {"type": "end", "files": 2, "bytes": 1009}


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_token_can_come_from_a_file(tree, server, capsys, monkeypatch, tmp_path, how):
    token_file = write(tmp_path / "token", TOKEN + "\n")
    monkeypatch.setenv("CKPTFLEET_SERVER", server.url)
    args = ["--root", str(tree)]
    if how == "flag":
        args += ["--token-file", str(token_file)]
    else:
        monkeypatch.setenv("CKPTFLEET_TOKEN_FILE", str(token_file))
    server.accepted()
    code, _, err = run(capsys, *args)
    assert code == 0, err
    assert server.requests[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_wait_polls_until_the_inventory_is_applied(tree, server, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    server.accepted(17)
    server.answer(200, {"id": 17, "status": "processing"})
    server.answer(
        200,
        {
            "id": 17,
            "status": "applied",
            "files_added": 2,
            "files_changed": 0,
            "files_gone": 1,
            "checkpoints_found": 1,
        },
    )

    code, out, err = run(capsys, "--server", server.url, "--root", str(tree), "--host", "gpu-a01", "--wait")

    assert code == 0, err
    assert (
        out.splitlines()[-1] == f"gpu-a01:{tree}: inventory 17 applied: 2 added, 0 changed, 1 gone, 1 checkpoints found"
    )
    assert [(r.method, r.path) for r in server.requests[1:]] == [("GET", "/api/v1/inventories/17/")] * 2
    assert server.requests[1].headers["Authorization"] == f"Bearer {TOKEN}"


def test_wait_fails_when_the_inventory_failed(tree, server, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    server.accepted(18)
    server.answer(
        200,
        {"id": 18, "status": "failed", "error": "the path 'a' is reported\nmore than once", "error_line": 3},
    )
    code, _, err = run(capsys, "--server", server.url, "--root", str(tree), "--host", "gpu-a01", "--wait")
    assert code == 1
    assert one_error(err) == (
        f"ckptfleet-agent: gpu-a01:{tree}: inventory 18 failed at line 3: the path 'a' is reported more than once"
    )


def test_a_refusal_is_one_line_with_the_servers_detail(tree, server, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    server.answer(
        403,
        {
            "error": "forbidden",
            "detail": "this token belongs to host 'gpu-a02' and cannot report for 'gpu-a01'",
        },
    )
    code, out, err = run(capsys, "--server", server.url, "--root", str(tree), "--host", "gpu-a01")
    assert code == 1
    assert out == ""
    line = one_error(err)
    assert line.startswith(f"ckptfleet-agent: gpu-a01:{tree}: server answered 403 ")
    assert line.endswith(": this token belongs to host 'gpu-a02' and cannot report for 'gpu-a01'")


def test_a_refused_root_does_not_stop_the_next_one(tree, tmp_path, server, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    other = tmp_path / "other"
    write(other / "x.bin", "x")
    server.answer(400, {"error": "unknown_root", "detail": f"'{tree}' is not a registered root of gpu-a01"})
    server.accepted(19)
    code, out, err = run(capsys, "--server", server.url, "--root", str(tree), "--root", str(other), "--host", "gpu-a01")
    assert code == 1
    assert "is not a registered root of gpu-a01" in one_error(err)
    assert out == f"gpu-a01:{other}: 1 files, 1 B sent as inventory 19 (received)\n"


def test_a_bad_token_stops_every_root(tree, tmp_path, server, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    other = tmp_path / "other"
    other.mkdir()
    server.answer(401, {"error": "not_authenticated", "detail": "unknown or revoked token"})
    code, _, err = run(capsys, "--server", server.url, "--root", str(tree), "--root", str(other))
    assert code == 1
    assert one_error(err).endswith("server answered 401 Unauthorized: unknown or revoked token")
    assert len(server.requests) == 1


def test_a_too_large_answer_without_json_is_still_one_line(tree, server, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    server.answer(413, raw=b"<html>\n<h1>413</h1>\n</html>", ctype="text/html")
    code, _, err = run(capsys, "--server", server.url, "--root", str(tree))
    assert code == 1
    assert "server answered 413" in one_error(err)


def test_an_unreachable_server_is_one_line(tree, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, _, err = run(capsys, "--server", f"http://127.0.0.1:{port}", "--root", str(tree))
    assert code == 1
    assert one_error(err) == (
        f"ckptfleet-agent: {socket.gethostname()}:{tree}: "
        f"cannot reach server http://127.0.0.1:{port}: Connection refused"
    )


def test_it_goes_through_the_http_proxy_the_environment_names(tree, server, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    monkeypatch.setenv("http_proxy", server.url)
    server.accepted()
    code, _, err = run(capsys, "--server", "http://fleet.invalid:8000", "--root", str(tree))
    assert code == 0, err
    assert server.requests[0].path == "http://fleet.invalid:8000/api/v1/inventories/"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--root", "{missing}"], {"CKPTFLEET_TOKEN": TOKEN}, "root {missing} does not exist"),
        (
            ["--root", "{tree}"],
            {},
            "no token: set CKPTFLEET_TOKEN, or CKPTFLEET_TOKEN_FILE or --token-file to a file",
        ),
        (
            ["--root", "{tree}", "--token-file", "{missing}"],
            {},
            "cannot read token file {missing}: No such file or directory",
        ),
        (
            ["--root", "{tree}"],
            {"CKPTFLEET_TOKEN_FILE": "{tree}"},
            "cannot read token file {tree}: Is a directory",
        ),
        (
            ["--root", "{tree}"],
            {"CKPTFLEET_TOKEN": "two words"},
            "CKPTFLEET_TOKEN does not hold a single-line token",
        ),
    ],
)
def test_configuration_errors_are_one_line_and_send_nothing(
    tree, tmp_path, server, capsys, monkeypatch, args, env, message
):
    def fill(text: str) -> str:
        return text.format(missing=tmp_path / "missing", tree=tree)

    for name, value in env.items():
        monkeypatch.setenv(name, fill(value))
    code, _, err = run(capsys, "--server", server.url, *[fill(a) for a in args])
    assert code == 1
    assert one_error(err) == f"ckptfleet-agent: {fill(message)}"
    assert server.requests == []


def test_a_root_whose_name_is_not_utf8_is_refused(tmp_path, capsys):
    bad = os.path.join(os.fsencode(tmp_path), b"nvme\xff")
    os.mkdir(bad)
    code, _, err = run(capsys, "--dry-run", "--root", os.fsdecode(bad))
    assert code == 1
    assert one_error(err).endswith("nvme\\xff is not valid UTF-8, so no server can match it")


def test_an_unusable_temporary_directory_is_one_line(tree, tmp_path, server, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    monkeypatch.setattr(agent.upload.tempfile, "tempdir", str(tmp_path / "no-such-tmp"))
    code, _, err = run(capsys, "--server", server.url, "--root", str(tree))
    assert code == 1
    assert "cannot write the inventory to a temporary file in" in one_error(err)
    assert server.requests == []


def test_help_and_version_exit_0(capsys):
    assert agent.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ckptfleet-agent {agent.__version__}".replace(" ", "/")
    assert agent.main(["--help"]) == 0
    assert "--checksums" in capsys.readouterr().out


def test_no_server_is_one_line(tree, capsys, monkeypatch):
    monkeypatch.setenv("CKPTFLEET_TOKEN", TOKEN)
    code, _, err = run(capsys, "--root", str(tree))
    assert (code, one_error(err)) == (
        1,
        "ckptfleet-agent: no server: pass --server URL or set CKPTFLEET_SERVER",
    )
    code, _, err = run(capsys, "--root", str(tree), "--server", "ftp://fleet")
    assert code == 1
    assert "must look like https://" in one_error(err)


def test_a_token_on_the_command_line_is_refused_and_never_echoed(tree, capsys):
    code, _, err = run(capsys, "--root", str(tree), "--token", TOKEN)
    assert (code, one_error(err)) == (
        1,
        "ckptfleet-agent: --token is not accepted: put the token in CKPTFLEET_TOKEN or a --token-file",
    )
    code, _, err = run(capsys, "--root", str(tree), "--tok", TOKEN)
    assert (code, one_error(err)) == (2, "ckptfleet-agent: unrecognized arguments: --tok (see --help)")


def test_usage_errors_exit_2_with_one_line(capsys):
    code, _, err = run(capsys, "--dry-run")
    assert code == 2
    assert "the following arguments are required: --root" in one_error(err)


def test_it_runs_as_the_built_file_copied_alone_on_the_oldest_python(tree, tmp_path, built_agent, oldest_python):
    copy = tmp_path / "bin" / "ckptfleet-agent.pyz"
    copy.parent.mkdir()
    shutil.copy(built_agent, copy)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("CKPTFLEET_", "PYTHON"))}
    result = subprocess.run(
        [oldest_python, str(copy), "--dry-run", "--root", str(tree), "--host", "gpu-a01"],
        capture_output=True,
        text=True,
        env=env,
        cwd=copy.parent,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    lines = ndjson(result.stdout.encode())
    assert lines[-1] == {"type": "end", "files": 2, "bytes": 1009}


def test_the_committed_fixture_trees_give_facts_without_errors():
    assert FIXTURE_TREES.is_dir(), f"no checkpoint trees under {FIXTURE_TREES}"
    for root in sorted(p for p in FIXTURE_TREES.iterdir() if p.is_dir()):
        for line in agent.scan_root(str(root), warn=pytest.fail):
            assert "error" not in line.get("facts", {}), line


def test_a_refusal_sent_before_the_body_is_read_is_still_reported():
    """The server checks the header after 256 KiB and hangs up on the rest of a big upload."""

    def refuse_early(listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as incoming:
            while incoming.readline() not in (b"\r\n", b""):
                pass
            incoming.read(256 * 1024)
            body = json.dumps({"error": "forbidden", "detail": "this token belongs to host 'gpu-a02'"}).encode()
            head = f"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            conn.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        thread = threading.Thread(target=refuse_early, args=(listener,), daemon=True)
        thread.start()
        body = os.urandom(16 * 1024 * 1024)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        with pytest.raises(agent.AgentError) as refused:
            agent.upload_inventory(url, TOKEN, io.BytesIO(body), len(body), timeout=10)
        thread.join(timeout=10)
    assert str(refused.value) == "server answered 403 Forbidden: this token belongs to host 'gpu-a02'"
    assert not refused.value.fatal


# --- pulls: one file of a promotion, from a tiny object store -------------------------------------


class FakeStore:
    """Answers GET /<name> from ``objects``: (status, body, headers)."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[int, bytes, dict[str, str]]] = {}
        store = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                status, body, headers = store.objects.get(self.path.lstrip("/"), (404, b"<Code>NoSuchKey</Code>", {}))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def put(self, name: str, body: bytes, *, etag: str | None = None, status: int = 200, **headers: str) -> str:
        etag = hashlib.md5(body).hexdigest() if etag is None else etag
        self.objects[name] = (status, body, {"ETag": f'"{etag}"', **headers})
        return etag


@pytest.fixture
def store():
    fake = FakeStore()
    yield fake
    fake.httpd.shutdown()
    fake.httpd.server_close()


def pull_item(store: FakeStore, root: Path, name: str, size: int, etag: str, **extra: Any) -> dict[str, Any]:
    rel = f"llm/llama/step-1/{name}"
    return {"id": 1, "root": str(root), "path": rel, "target": f"{root}/{rel}", "size": size, "etag": etag,
            "sha256": None, "url": f"{store.url}/{name}", "source": f"s3://b/{name}", **extra}  # fmt: skip


def files_below(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_a_pull_checks_the_md5_of_a_single_part_etag_and_leaves_nothing_when_it_differs(store, tmp_path):
    body = b"x" * 5000
    etag = store.put("good", body)
    result, detail, measured = agent.pull_file(str(tmp_path), pull_item(store, tmp_path, "good", 5000, etag))
    assert (result, detail) == ("pulled", "pulled 4.9 KiB; size, MD5 = ETag checked")
    assert measured == {"size": 5000, "sha256": hashlib.sha256(body).hexdigest()}
    store.put("bad", b"y" * 5000, etag=etag)  # the store says the frozen ETag, the bytes are others
    result, detail, _ = agent.pull_file(str(tmp_path), pull_item(store, tmp_path, "bad", 5000, etag))
    assert result == "failed" and "the MD5 of what arrived" in detail
    assert files_below(tmp_path) == ["llm/llama/step-1/good"]


@pytest.mark.parametrize(
    ("etag", "headers"),
    [("0123456789abcdef0123456789abcdef-3", {}), ("0" * 32, {"x-amz-server-side-encryption": "aws:kms"})],
    ids=["multipart", "sse-kms"],
)
def test_an_etag_that_is_no_md5_is_never_compared(store, tmp_path, etag, headers):
    store.put("obj", b"z" * 100, etag=etag, **headers)
    result, detail, _ = agent.pull_file(str(tmp_path), pull_item(store, tmp_path, "obj", 100, etag))
    assert (result, detail) == ("pulled", "pulled 100 B; size checked")


def test_a_known_sha256_is_checked(store, tmp_path):
    etag = store.put("obj", b"q" * 10, etag="abc-2")
    item = pull_item(store, tmp_path, "obj", 10, etag, sha256="f" * 64)
    result, detail, _ = agent.pull_file(str(tmp_path), item)
    assert result == "failed" and detail.startswith("the sha256 of what arrived is ")
    assert files_below(tmp_path) == []


def test_trouble_that_may_pass_leaves_the_file_for_later_and_a_refusal_fails_it(store, tmp_path):
    store.put("busy", b"<Code>SlowDown</Code>", status=503)
    with pytest.raises(agent.store.Later, match="503"):
        agent.pull_file(str(tmp_path), pull_item(store, tmp_path, "busy", 21, ""))
    store.put("old", b"<Code>AccessDenied</Code><Message>Request has expired</Message>", status=403)
    with pytest.raises(agent.store.Later, match="expired"):
        agent.pull_file(str(tmp_path), pull_item(store, tmp_path, "old", 10, ""))
    result, detail, _ = agent.pull_file(str(tmp_path), pull_item(store, tmp_path, "gone", 10, ""))
    assert (result, detail) == ("failed", "the store answered 404 Not Found: NoSuchKey")
    assert files_below(tmp_path) == []


def test_a_pull_never_replaces_and_refuses_paths_that_leave_the_root(store, tmp_path):
    root = tmp_path / "root"
    etag = store.put("obj", b"new" * 10)
    write(root / "llm/llama/step-1/obj", b"old" * 10)
    result, detail, _ = agent.pull_file(str(root), pull_item(store, root, "obj", 30, etag))
    assert result == "skipped" and "never overwritten" in detail
    assert (root / "llm/llama/step-1/obj").read_bytes() == b"old" * 10
    for rel in ("../x", "/abs/x", "a//b", "a/./b", "a/\nb"):
        item = {**pull_item(store, root, "obj", 30, etag), "path": rel, "target": f"{root}/{rel}"}
        assert agent.pull_file(str(root), item)[:2] == ("skipped", "refused: not a plain relative path below the root")
    item = {**pull_item(store, root, "obj", 30, etag), "url": "file:///etc/passwd"}
    assert agent.pull_file(str(root), item)[:2] == ("skipped", "refused: the download URL is not http(s)")
    assert files_below(tmp_path) == ["root/llm/llama/step-1/obj"]


def test_pulls_and_deletions_do_not_go_together(capsys, tree):
    code, _, err = run(capsys, "--root", str(tree), "--pulls", "--deletions", "--server", "http://x")
    assert code == 1 and "--deletions and --pulls do not go together" in err


def test_a_deepspeed_model_states_pickle_runs_nothing_it_names(tmp_path):
    import zipfile

    marker = tmp_path / "ran"
    # GLOBAL os.system, REDUCE with a command: unpickled for real, this would create the marker.
    evil = (
        b"\x80\x02}q\x00(X\r\x00\x00\x00dp_world_sizeq\x01K\x04X\r\x00\x00\x00mp_world_sizeq\x02K\x01"
        b"X\x01\x00\x00\x00xcos\nsystem\n(X"
        + len(f"touch {marker}").to_bytes(4, "little")
        + f"touch {marker}".encode()
        + b"tRu."
    )
    path = tmp_path / "global_step5" / "mp_rank_00_model_states.pt"
    path.parent.mkdir()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("mp_rank_00_model_states/data.pkl", evil)
    facts = agent.file_facts(str(path))
    assert not marker.exists()
    assert facts["deepspeed"] == {"dp_world_size": 4, "mp_world_size": 1}


class _Touch:
    """Pickles as a call of os.system: unpickled for real, it would create ``marker``."""

    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_megatron_args_give_the_parallel_sizes_and_the_pickle_runs_nothing_it_names(tmp_path):
    import argparse
    import pickle
    import zipfile

    marker = tmp_path / "ran"
    # As Megatron saves it: state_dict['args'] is the job's argparse.Namespace (torch.save pickles with protocol 2).
    args = argparse.Namespace(tensor_model_parallel_size=4, pipeline_model_parallel_size=2, num_layers=8)
    state = {"args": args, "checkpoint_version": 3.0, "iteration": 100, "rng_state": [_Touch(marker)]}
    path = tmp_path / "iter_0000100" / "mp_rank_00_000" / "model_optim_rng.pt"
    path.parent.mkdir(parents=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("model_optim_rng/data.pkl", pickle.dumps(state, protocol=2))
    facts = agent.file_facts(str(path))
    assert not marker.exists()
    assert facts["megatron"] == {"tensor_model_parallel_size": 4, "pipeline_model_parallel_size": 2}
    # Version < 3.0 checkpoints called the tensor size model_parallel_size (check_checkpoint_args).
    old = {"args": argparse.Namespace(model_parallel_size=2), "checkpoint_version": 2.0}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("model_optim_rng/data.pkl", pickle.dumps(old, protocol=2))
    assert agent.file_facts(str(path))["megatron"] == {"tensor_model_parallel_size": 2}
    # No args (or none of the sizes): no "megatron" facts, and the server infers the grid from the folders.
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("model_optim_rng/data.pkl", pickle.dumps({"iteration": 1}, protocol=2))
    assert "megatron" not in agent.file_facts(str(path))


def test_the_wire_contract_is_the_agents_and_the_server_imports_it():
    """One definition: the server's path and sha256 rules are the agent's, and its line limit the agent's default."""
    from django.conf import settings

    from fleet import agent
    from ingest.inventory import lines

    assert lines.path_problem is agent.path_problem and lines.SHA256_HEX is agent.SHA256_HEX
    assert settings.INVENTORY_MAX_LINE == agent.MAX_LINE_BYTES  # the default when CKPTFLEET_INVENTORY_MAX_LINE is unset
    for bad, why in (
        ("", "non-empty"),
        ("/abs/x", "absolute"),
        ("a//b", "component"),
        ("a/../b", "component"),
        ("a\\b", "backslash"),
        ("a\x00b", "control"),
        ("a\ud800b", "UTF-8"),
        ("x" * 4097, "longer"),
    ):
        assert why in agent.path_problem(bad)
        with pytest.raises(ValueError, match=why):
            lines.check_path(bad)
    assert agent.path_problem("llm/run-1/step-100/__0_0.distcp") == ""
