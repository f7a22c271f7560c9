"""Work that apps above catalog attach to catalog's changes: a registry, so that catalog never imports them.

An app registers its function in its ``AppConfig.ready`` (spend keeps its usage rollups in step this way). Every
registered function runs in the caller's transaction, in the order registered: "one verdict, every view".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

_copies_restated: list[Callable[[list[int]], Any]] = []
_location_rejudged: list[Callable[[Any, datetime], Any]] = []
_run_status_changed: list[Callable[[int, str], Any]] = []
_protections: list[Callable[[list[int]], dict[int, str]]] = []
_provenance: list[Callable[[Any, list[str]], dict[str, Made]]] = []


@dataclass(frozen=True)
class Made:
    """Where the product wrote a copy from: the source copy, when it began writing, and what wrote it."""

    source_id: int
    at: datetime
    by: str


def on_copies_restated(fn: Callable[[list[int]], Any]) -> Callable[[list[int]], Any]:
    """Register ``fn(copy_ids)``: called when verification changed these copies' state."""
    if fn not in _copies_restated:
        _copies_restated.append(fn)
    return fn


def on_location_rejudged(fn: Callable[[Any, datetime], Any]) -> Callable[[Any, datetime], Any]:
    """Register ``fn(location, now)``: called when a location's copies were judged again outside an inventory
    (after a deletion job removed files)."""
    if fn not in _location_rejudged:
        _location_rejudged.append(fn)
    return fn


def on_run_status_changed(fn: Callable[[int, str], Any]) -> Callable[[int, str], Any]:
    """Register ``fn(run_id, status)``: called when a run's status changed (``catalog.lifecycle``)."""
    if fn not in _run_status_changed:
        _run_status_changed.append(fn)
    return fn


def on_protection_asked(fn: Callable[[list[int]], dict[int, str]]) -> Callable[[list[int]], dict[int, str]]:
    """Register ``fn(checkpoint_ids) -> {checkpoint id: why it is protected}``: the ingest asks it before it moves a
    copy or a file to another checkpoint (holds, pins, leases and deletions live in ``actions``, above catalog)."""
    if fn not in _protections:
        _protections.append(fn)
    return fn


def on_provenance_asked(
    fn: Callable[[Any, list[str]], dict[str, Made]],
) -> Callable[[Any, list[str]], dict[str, Made]]:
    """Register ``fn(location, paths) -> {path: Made}``: asked by the ingest when copies appear at these paths of a
    location, for the ones the product itself wrote there from another copy (moves and promotions live above
    catalog). Only what is recorded this way is provenance; the order copies were written in is not."""
    if fn not in _provenance:
        _provenance.append(fn)
    return fn


def provenance(location: Any, paths: Iterable[str]) -> dict[str, Made]:
    """{path: Made} for the copies among ``paths`` at ``location`` that the product wrote from another copy."""
    wanted = sorted(set(paths))
    out: dict[str, Made] = {}
    if not wanted:
        return out
    for fn in _provenance:
        for path, made in fn(location, wanted).items():
            out.setdefault(path, made)
    return out


def protections(checkpoint_ids: Iterable[int]) -> dict[int, str]:
    """{checkpoint id: why} for the checkpoints among ``checkpoint_ids`` that something protects."""
    ids = sorted(set(checkpoint_ids))
    out: dict[int, str] = {}
    if not ids:
        return out
    for fn in _protections:
        for pk, why in fn(ids).items():
            out[pk] = f"{out[pk]}; {why}" if pk in out else why
    return out


def copies_restated(copy_ids: Iterable[int]) -> None:
    ids = list(copy_ids)
    for fn in _copies_restated:
        fn(ids)


def location_rejudged(location: Any, now: datetime) -> None:
    for fn in _location_rejudged:
        fn(location, now)


def run_status_changed(run_id: int, status: str) -> None:
    for fn in _run_status_changed:
        fn(run_id, status)
