"""The few facts read from the files checkpoint formats use as manifests (DCP ``.metadata``, safetensors headers,
HF index files, trainer state, tracker files, the tail of ``torch.save`` zips), never running anything of a file."""

from __future__ import annotations

import builtins
import collections
import io
import json
import os
import pickle
import re
import stat
import struct
import zipfile
from collections.abc import Callable, Iterator
from typing import IO, Any, BinaryIO

from .common import HASH_BLOCK, one_line, os_reason

SAFETENSORS_MAX_HEADER = 100_000_000  # huggingface/safetensors refuses larger headers
DCP_MAX_BYTES = 64 * 1024 * 1024
JSON_FACTS_MAX_BYTES = 1024 * 1024
BIG_JSON_MAX_BYTES = 64 * 1024 * 1024  # index and trainer_state files: only a field is sent
TEXT_FACTS_BYTES = 256
ZIP_TAIL_BYTES = 64 * 1024
_DCP_METADATA = re.compile(r"^(?:\.metadata|__\d+\.metadata)$")
_JSON_NAMES = frozenset({"metadata.json", "integrity.json", "_CHECKPOINT_METADATA", "ckptfleet.json", "config.json"})
_TEXT_NAMES = frozenset({"latest", "latest_checkpointed_iteration.txt", "commit_success.txt"})
_TORCH_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
# torch.save's legacy (pre-zip) format starts with this magic number as a pickled long.
_LEGACY_TORCH_MAGIC = b"\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


class FactsError(Exception):
    pass


def facts_kind(name: str) -> str | None:
    """Which facts (if any) the wire format asks for about a file with this name."""
    if _DCP_METADATA.match(name):
        return "dcp_metadata"
    if name == "trainer_state.json":
        return "trainer_state"
    if name in _JSON_NAMES:
        return "json"
    if name in _TEXT_NAMES:
        return "text"
    if name.endswith(".index.json"):
        return "hf_index"
    if name.endswith(".safetensors"):
        return "safetensors"
    if name.endswith(_TORCH_SUFFIXES):
        return "torch_file"
    return None


def file_facts(path: str) -> dict[str, Any] | None:
    """The facts object for the file at ``path``, or None when its name calls for none.

    Only headers, tails and small manifests are read. Any failure becomes
    ``{"kind": ..., "error": "one line"}``; this never raises for a bad or unreadable file.
    """
    name = os.path.basename(path)
    kind = facts_kind(name)
    if kind is None:
        return None
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            return stream_facts(name, f, size)
    except FactsError as exc:
        return {"kind": kind, "error": one_line(exc)}
    except OSError as exc:
        return {"kind": kind, "error": one_line(f"cannot read: {os_reason(exc)}")}


def stream_facts(name: str, f: BinaryIO, size: int) -> dict[str, Any] | None:
    """The facts object for a file called ``name`` (its base name), read from ``f`` of ``size`` bytes.

    ``f`` is any seekable binary stream positioned at the start: an open file here, a reader of
    ranged GETs on the server's bucket scanner. Only headers, tails and small manifests are read.
    None when the name calls for no facts; any failure becomes ``{"kind": ..., "error": "one line"}``,
    so this never raises for a bad or unreadable file.
    """
    kind = facts_kind(name)
    if kind is None:
        return None
    try:
        if kind == "torch_file":
            return _torch_file_facts(f, size, name=name)
        return _READERS[kind](f, size)
    except FactsError as exc:
        return {"kind": kind, "error": one_line(exc)}
    except OSError as exc:
        return {"kind": kind, "error": one_line(f"cannot read: {os_reason(exc)}")}
    except Exception as exc:  # a hostile or corrupt file must never stop the scan
        return {"kind": kind, "error": one_line(f"{type(exc).__name__}: {exc}")}


def open_regular(path: str) -> io.FileIO:
    # O_NOFOLLOW and O_NONBLOCK: a file swapped for a symlink or a FIFO after the listing is neither
    # followed nor allowed to block the agent.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FactsError("not a regular file")
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _read_exact(f: BinaryIO, n: int) -> bytes:
    chunks: list[bytes] = []
    while n > 0:
        chunk = f.read(min(n, HASH_BLOCK))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_at(f: BinaryIO, offset: int, n: int) -> bytes:
    f.seek(offset)
    return _read_exact(f, n)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _reject_constant(name: str) -> Any:
    raise FactsError(f"invalid JSON: {name} is not a number")


def _load_json(f: BinaryIO, size: int, limit: int) -> Any:
    if size > limit:
        raise FactsError(f"file is {size} bytes, over the {limit // (1024 * 1024)} MiB read limit")
    raw = _read_exact(f, limit + 1)
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise FactsError("not UTF-8 text") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the decoder recurses
        raise FactsError(f"invalid JSON: {exc}") from None


def _safetensors_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    if size < 8:
        raise FactsError(f"file is {size} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", _read_exact(f, 8))
    if n > SAFETENSORS_MAX_HEADER:
        raise FactsError(f"header length {n} is over the {SAFETENSORS_MAX_HEADER}-byte limit")
    if 8 + n > size:
        raise FactsError(f"header of {n} bytes is cut off: the file has {size} bytes")
    try:
        header = json.loads(_read_exact(f, n).decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise FactsError(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise FactsError("header is not a JSON object")
    tensors = 0
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(_is_count(o) for o in offsets)
            and offsets[0] <= offsets[1]
        ):
            raise FactsError(f"tensor {name[:80]!r} has no valid data_offsets")
        tensors += 1
        end = max(end, offsets[1])
    return {"kind": "safetensors", "expected_size": 8 + n + end, "tensors": tensors}


def _hf_index_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    doc = _load_json(f, size, BIG_JSON_MAX_BYTES)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise FactsError("no weight_map of tensor names to shard files")
    metadata = doc.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    return {
        "kind": "hf_index",
        "total_size": total if _is_count(total) else None,
        "shards": sorted(set(weight_map.values())),
    }


def _trainer_state_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    doc = _load_json(f, size, BIG_JSON_MAX_BYTES)
    step = doc.get("global_step") if isinstance(doc, dict) else None
    if not _is_count(step):
        raise FactsError("no integer global_step")
    return {"kind": "trainer_state", "global_step": step}


def _json_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    content = _load_json(f, size, JSON_FACTS_MAX_BYTES)
    return {"kind": "json", "content": content}


def _text_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    raw = _read_exact(f, TEXT_FACTS_BYTES)
    if b"\x00" in raw:
        # A tracker full of zeros is what a crash between allocation and write leaves behind.
        raise FactsError("file contains NUL bytes")
    return {"kind": "text", "content": raw.decode("utf-8", "replace").strip()}


def _torch_file_facts(f: BinaryIO, size: int, *, name: str = "") -> dict[str, Any]:
    head = _read_exact(f, 32)
    if head.startswith(b"PK\x03\x04"):
        facts: dict[str, Any] = {"kind": "torch_file", "container": "zip", "complete": zip_complete(f, size)}
        if facts["complete"] and name.endswith("model_states.pt"):
            recorded = _deepspeed_counts(_saved_state(f))
            if recorded:
                facts["deepspeed"] = recorded
        elif facts["complete"] and name == MEGATRON_MODEL:
            recorded = _megatron_sizes(_saved_state(f))
            if recorded:
                facts["megatron"] = recorded
        return facts
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        if _LEGACY_TORCH_MAGIC in head:
            # Legacy torch.save appends raw tensor storages after its pickles, so the last byte
            # says nothing about completeness.
            return {"kind": "torch_file", "container": "pickle", "complete": None}
        return {"kind": "torch_file", "container": "pickle", "complete": read_at(f, size - 1, 1) == b"."}
    return {"kind": "torch_file", "container": "unknown", "complete": None}


def zip_complete(f: BinaryIO, size: int) -> bool:
    """True when a well-formed end-of-central-directory record ends the file.

    A mere signature match is not enough: the tail of a truncated shard is tensor data, which may
    contain ``PK\\x05\\x06`` by chance, and a partial write must never look complete. The record
    must end exactly at the end of the file (after its comment), its central directory must lie
    before it, and a ZIP64 archive's record must be preceded by its ZIP64 locator.
    """
    for tail, base, pos in zip_end_candidates(f, size):
        cd_size, cd_offset = struct.unpack("<II", tail[pos + 12 : pos + 20])
        if cd_offset == 0xFFFFFFFF or cd_size == 0xFFFFFFFF:
            if pos >= 20 and tail[pos - 20 : pos - 16] == b"PK\x06\x07":
                return True
        elif cd_offset + cd_size <= base + pos:
            return True
    return False


def zip_end_candidates(f: BinaryIO, size: int) -> Iterator[tuple[bytes, int, int]]:
    """(tail, its offset in the file, position in it) of each end-of-central-directory record in the last
    64 KiB + 22 bytes whose comment reaches exactly to the end of the file, the last one first."""
    tail_len = min(size, ZIP_TAIL_BYTES + 22)
    base = size - tail_len
    tail = read_at(f, base, tail_len)
    pos = tail.rfind(b"PK\x05\x06")
    while pos >= 0:
        if pos + 22 <= len(tail):
            (comment_len,) = struct.unpack("<H", tail[pos + 20 : pos + 22])
            if pos + 22 + comment_len == len(tail):
                yield tail, base, pos
        pos = tail.rfind(b"PK\x05\x06", 0, pos)


def _dcp_metadata_facts(f: BinaryIO, size: int) -> dict[str, Any]:
    if size > DCP_MAX_BYTES:
        raise FactsError(f"file is {size} bytes, over the 64 MiB read limit")
    data = _read_exact(f, DCP_MAX_BYTES)
    if not data:
        raise FactsError("file is empty")
    try:
        metadata = _RestrictedUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError) as exc:
        raise FactsError(f"cannot unpickle: {exc or 'truncated'}") from None
    return {"kind": "dcp_metadata", "files": _dcp_files(metadata)}


def _saved_state(f: BinaryIO) -> Any:
    """The object a torch.save zip holds, read from its ``data.pkl`` with every class an inert stub and every tensor
    storage a kept persistent id (nothing of the file runs, no tensor is loaded); None when it cannot be read."""
    try:
        archive = zipfile.ZipFile(f)
        member = next((i for i in archive.infolist() if i.filename.endswith("/data.pkl")), None)
        if member is None or member.file_size > DCP_MAX_BYTES:
            return None
        with archive.open(member) as pkl:
            return _InertUnpickler(pkl).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, KeyError, TypeError, OSError):
        return None


def _deepspeed_counts(state: Any) -> dict[str, int]:
    """The world sizes a DeepSpeed ``*model_states.pt`` records about its save: ``dp_world_size`` (how many
    data-parallel ranks wrote an optimizer file per model-parallel rank) and ``mp_world_size``. {} when it has
    neither."""
    if not isinstance(state, dict):
        return {}
    return {key: state[key] for key in ("dp_world_size", "mp_world_size") if _is_count(state.get(key))}


# Megatron-LM's legacy checkpoints: every model-parallel rank writes ``mp_rank_*/model_optim_rng.pt`` holding
# ``state_dict['args'] = args``, the argparse.Namespace of the job (megatron/training/checkpointing.py
# ``generate_state_dict``), whose parallel sizes say how many rank folders the save has (``get_checkpoint_name``).
MEGATRON_MODEL = "model_optim_rng.pt"
MEGATRON_SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size")


def _megatron_sizes(state: Any) -> dict[str, int]:
    """The parallel sizes a Megatron ``model_optim_rng.pt`` records in its ``args``; {} when it records none.

    ``args`` is an argparse.Namespace, unpickled as an inert stub whose attributes are the Namespace's (a plain
    dict, as some converters write, is read the same way). Checkpoints older than version 3.0 called the tensor
    size ``model_parallel_size`` (``check_checkpoint_args``)."""
    args = state.get("args") if isinstance(state, dict) else None
    attrs = args.__dict__ if isinstance(args, _Stub) else args
    if not isinstance(attrs, dict):
        return {}
    sizes = {key: attrs[key] for key in MEGATRON_SIZES if _is_count(attrs.get(key)) and attrs[key] >= 1}
    if "tensor_model_parallel_size" not in sizes and _is_count(attrs.get("model_parallel_size")):
        if attrs["model_parallel_size"] >= 1:
            sizes["tensor_model_parallel_size"] = attrs["model_parallel_size"]
    return sizes


_READERS: dict[str, Callable[[BinaryIO, int], dict[str, Any]]] = {
    "dcp_metadata": _dcp_metadata_facts,
    "safetensors": _safetensors_facts,
    "hf_index": _hf_index_facts,
    "trainer_state": _trainer_state_facts,
    "json": _json_facts,
    "text": _text_facts,
    "torch_file": _torch_file_facts,
}


class _Stub:
    """Inert stand-in for a torch.* or pathlib.* class: it keeps what it is given and runs nothing.

    It accepts every way pickle builds an object: positional and keyword constructor arguments (REDUCE, kept in
    ``_ckpt_args`` and as attributes) and any ``__setstate__`` state, whether a dataclass ``__dict__``, a
    ``(dict, slots-dict)`` pair, or a tuple or list such as TensorProperties sends (kept in ``_ckpt_state``).

    It has no ``__new__`` of its own, so pickle's NEWOBJ makes each instance in C (``object.__new__``); a DCP
    ``.metadata`` of a 70B model holds about 11,000 of them, and the Python ``__new__`` this class used to have took
    half of the time its unpickling took. The price: NEWOBJ's arguments (a class with ``__getnewargs__``) are not
    kept. No class of DCP's metadata has any: torch pickles its dataclasses with NEWOBJ and no arguments.
    """

    _ckpt_global = "?"
    _ckpt_args: tuple[Any, ...] = ()
    _ckpt_state: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        attrs = self.__dict__
        attrs["_ckpt_args"] = args
        attrs.update(kwargs)

    def __setstate__(self, state: Any) -> None:
        attrs = self.__dict__
        if type(state) is dict:
            attrs.update(state)
        elif isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
            for part in state:
                attrs.update(part or {})
        else:
            attrs["_ckpt_state"] = state

    def __reduce__(self) -> Any:
        raise TypeError("a stub of a pickled class cannot be pickled again")

    def __repr__(self) -> str:
        return f"<stub {self._ckpt_global}>"


_SAFE_BUILTINS: dict[str, Any] = {
    name: getattr(builtins, name) for name in ("set", "frozenset", "slice", "complex", "tuple", "list", "dict")
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickles DCP metadata with stubs for torch and pathlib classes, and refuses every other global."""

    def __init__(self, file: IO[bytes]) -> None:
        super().__init__(file)
        self._stubs: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch" and name == "Size":
            return tuple
        if module == "collections" and name == "OrderedDict":
            return collections.OrderedDict
        if module in ("builtins", "__builtin__") and name in _SAFE_BUILTINS:
            return _SAFE_BUILTINS[name]
        if module in ("torch", "pathlib") or module.startswith(("torch.", "pathlib.")):
            key = (module, name)
            if key not in self._stubs:
                self._stubs[key] = type("Stub", (_Stub,), {"_ckpt_global": f"{module}.{name}"})
            return self._stubs[key]
        raise pickle.UnpicklingError(f"refused to load global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused a persistent id")


class _InertUnpickler(_RestrictedUnpickler):
    """Unpickles a torch.save ``data.pkl`` for a few plain values: every global is an inert stub (no code of
    the file runs) and every tensor storage a persistent id that is kept, never loaded."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return super().find_class(module, name)
        except pickle.UnpicklingError:
            key = (module, name)
            if key not in self._stubs:
                self._stubs[key] = type("Stub", (_Stub,), {"_ckpt_global": f"{module}.{name}"})
            return self._stubs[key]

    def persistent_load(self, pid: Any) -> Any:
        return None


def _field(obj: Any, name: str, index: int) -> Any:
    """Attribute ``name`` of an unpickled object, else its ``index``-th positional value (field order)."""
    if isinstance(obj, _Stub):
        attrs = obj.__dict__
        if name in attrs:
            return attrs[name]
        for values in (obj._ckpt_state, obj._ckpt_args):
            if isinstance(values, (list, tuple)) and len(values) > index:
                return values[index]
        raise FactsError(f"{obj._ckpt_global} has no {name}")
    if isinstance(obj, dict) and name in obj:
        return obj[name]
    if isinstance(obj, (list, tuple)) and len(obj) > index:
        return obj[index]
    raise FactsError(f"{type(obj).__name__} has no {name}")


def _dcp_files(metadata: Any) -> dict[str, int]:
    """Every file named in Metadata.storage_data with the least size it must have: max(offset + length)."""
    # Field order of torch's dataclasses, for states that arrive as bare sequences.
    storage = _field(metadata, "storage_data", 2)
    if not isinstance(storage, dict):
        raise FactsError("Metadata.storage_data is not a mapping")
    files: dict[str, int] = {}
    for info in storage.values():
        rel = _field(info, "relative_path", 0)
        offset = _field(info, "offset", 1)
        length = _field(info, "length", 2)
        if not isinstance(rel, str) or not rel:
            raise FactsError("a storage entry has no relative_path")
        if not (_is_count(offset) and _is_count(length)):
            raise FactsError(f"storage entry of {rel[:80]!r} has a bad offset or length")
        files[rel] = max(files.get(rel, 0), offset + length)
    return dict(sorted(files.items()))
