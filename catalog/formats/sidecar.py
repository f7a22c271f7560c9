"""``ckptfleet.json``: the sidecar manifest a training job can write next to a checkpoint.

The sidecar is the most trustworthy thing we can find -- the writer's own list of what it wrote -- so it
has the highest priority. It does not replace the format: the directory is still recognised by the
other formats (DCP, HF, ...), and the sidecar adds what only the job knows (run, team, importance) and
the exact expected files with their sizes and checksums.

Schema ``ckptfleet/1`` (a JSON object, UTF-8, at most 1 MiB)::

    {
      "schema": "ckptfleet/1",              # optional; other values are noted, not refused
      "run": "llama-7b-pretrain",           # optional str: the run this checkpoint belongs to
      "team": "llm",                        # optional str: the owning team
      "step": 2000,                         # optional int >= 0: the training step
      "importance": "milestone",            # optional: critical | milestone | routine | transient
      "status": "finished",                 # optional: the run's status, active | finished | failed | abandoned
      "status_reason": "reached 2000 steps",  # optional str (at most 500 characters): why
      "gpus": 64,                           # optional int 1..1000000: GPUs the job trains on (recovery point)
      "parent": {"team": "llm",             # optional: the checkpoint this run was initialised or fine-tuned
                 "run": "llama-7b-pretrain",#   from; "team" defaults to this run's team; "step" int >= 0
                 "step": 2000},
      "saved_at": "2026-10-28T12:00:00Z",   # optional ISO 8601 instant with an offset: when the save finished
      "format": "pytorch_dcp",              # optional str: informational only
      "files": [                            # required: every file of the checkpoint except this one
        {"path": "__0_0.distcp",            #   '/'-separated, relative to the sidecar's directory,
         "size": 1048576,                   #   no '..'; size in bytes (int >= 0)
         "sha256": "ab12..."},              #   optional lowercase hex sha256 of the content
        ...
      ]
    }

Where it lives: in the checkpoint's directory (``step-2000/ckptfleet.json``). For a single-file
checkpoint, in the directory that holds the file, listing that file; one sidecar describes one
checkpoint, so such a file wants a directory of its own.

Judgement: a listed file missing -> partial; a size differing -> corrupt; a sha256 differing from the
checksum the inventory carries -> corrupt (when the inventory has sha256s); an unreadable or malformed
sidecar -> corrupt. The listed sha256s become ``Found.reference_checksums`` for later verification.

GPUs and parent: the ingest keeps the newest sidecar's ``gpus`` as the run's GPU count (source "sidecar") and
its ``parent`` as the run's parent checkpoint (``catalog.lineage``; an operator's parent is not replaced). A
``gpus`` that is not a whole number from 1 to 1,000,000, or a ``parent`` that is not such an object, is
ignored and the copy's reasons say why.

Saved at: the checkpoint's ages count from it (``catalog.ages``), ahead of the files' mtimes or LastModified, which
a copy or an upload resets. A time without an offset, or one that is not an ISO 8601 instant, is ignored and the
copy's reasons say why.

Status: the ingest sets the run's status from the sidecar of its newest step that has one
(``catalog.lifecycle``, source "sidecar"), unless the status changed after the sidecar was written. An
unknown ``status``, or a ``status_reason`` that is not text of at most 500 characters, is refused: the
status is not applied and the copy's reasons say why; the copy itself is judged as usual.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from catalog.formats.base import CORRUPT, PARTIAL, CheckpointFormat, DirView, Found
from catalog.formats.common import json_content, lookup, size_words, step_from_name

SIDECAR = "ckptfleet.json"
SCHEMA = "ckptfleet/1"
IMPORTANCE = ("critical", "milestone", "routine", "transient")
# What a job may say of its run (catalog.lifecycle.JOB_STATUSES; formats sit below the catalog's services).
STATUSES = ("active", "finished", "failed", "abandoned")
MAX_STATUS_REASON = 500
MAX_GPUS = 1_000_000


class SidecarFormat(CheckpointFormat):
    """A directory with a ``ckptfleet.json``: the underlying format's copy, enriched and checked."""

    name = "sidecar"
    label = "ckptfleet.json sidecar"
    priority = 0

    def claim(self, directory: DirView) -> list[Found]:
        entry = directory.files.get(SIDECAR)
        if entry is None:
            return []
        # Imported here: the registry imports this module to build itself.
        from catalog.formats import FORMATS

        underlying: list[Found] = []
        for fmt in FORMATS:
            if fmt is self or isinstance(fmt, SidecarFormat):
                continue
            underlying = fmt.claim(directory)
            if underlying:
                break

        probe = Found(path=directory.path, format=self.name, step=None)
        content = json_content(probe, entry, SIDECAR)
        if entry.facts is None:
            # Not read (e.g. a bucket listing): the sidecar is a member file of whatever is here.
            if not underlying:
                return []
            target = self._pick(underlying, set(), directory)
            if target is not None:
                target.reasons.append(f"{SIDECAR} was not read: its hints and file list are unknown")
                self._add_files(target, [entry.path])
            return underlying

        listed = self._validate(probe, content)
        listed_paths = {directory.child_path(f["path"]) for f in listed}
        target = self._pick(underlying, listed_paths, directory)
        if target is None:
            # No single copy fits: the sidecar alone makes this directory a checkpoint, owning the
            # directory's files that no other copy here owns.
            taken = {path for found in underlying for path in found.files}
            target = Found(
                path=directory.path,
                format=self.name,
                step=step_from_name(directory.name),
                files=sorted(e.path for e in directory.files.values() if e.path not in taken),
            )
            underlying.append(target)
        target.reasons.extend(probe.reasons)
        self._merge_state(target, probe)
        if isinstance(content, dict):
            self._apply(target, content, listed, directory)
        self._add_files(target, [entry.path])
        return underlying

    @staticmethod
    def _pick(underlying: list[Found], listed: set[str], directory: DirView) -> Found | None:
        """The copy the sidecar describes: the directory itself, else the one file copy it lists (or the
        only one there is, when its list is unknown); None when that is ambiguous."""
        for found in underlying:
            if found.path == directory.path:
                return found
        candidates = [f for f in underlying if listed & set(f.files)] if listed else underlying
        return candidates[0] if len(candidates) == 1 else None

    @staticmethod
    def _merge_state(target: Found, probe: Found) -> None:
        rank = {"complete": 0, "partial": 1, "corrupt": 2}
        if rank[probe.state] > rank[target.state]:
            target.state = probe.state

    @staticmethod
    def _add_files(target: Found, paths: list[str]) -> None:
        merged = set(target.files)
        merged.update(paths)
        target.files = sorted(merged)

    @staticmethod
    def _validate(found: Found, content: Any) -> list[dict[str, Any]]:
        """The well-formed file records; every problem with the sidecar itself makes the copy corrupt."""
        if content is None:
            return []
        if not isinstance(content, dict):
            found.fail(CORRUPT, f"{SIDECAR} is not a JSON object")
            return []
        files = content.get("files")
        if not isinstance(files, list):
            found.fail(CORRUPT, f'{SIDECAR} has no "files" list')
            return []
        good = []
        for i, record in enumerate(files):
            path = record.get("path") if isinstance(record, dict) else None
            size = record.get("size") if isinstance(record, dict) else None
            if (
                not isinstance(path, str)
                or not path
                or path.startswith("/")
                or any(part in ("", ".", "..") for part in path.split("/"))
                or not isinstance(size, int)
                or isinstance(size, bool)
                or size < 0
            ):
                found.fail(CORRUPT, f"{SIDECAR}: files[{i}] is not a {{path, size[, sha256]}} record")
                continue
            good.append(record)
        return good

    @staticmethod
    def _apply_status(target: Found, content: dict[str, Any], sidecar) -> None:
        status, reason = content.get("status"), content.get("status_reason")
        if status is None:
            if reason is not None:
                target.reasons.append(f'{SIDECAR}: "status_reason" without "status" ignored')
            return
        if not isinstance(status, str) or status.strip().lower() not in STATUSES:
            target.reasons.append(
                f"{SIDECAR}: status {status!r} refused (one of {', '.join(STATUSES)}); the run's status is unchanged"
            )
            return
        if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_STATUS_REASON):
            target.reasons.append(
                f"{SIDECAR}: status_reason must be text of at most {MAX_STATUS_REASON} characters; "
                "the run's status is unchanged"
            )
            return
        target.status = status.strip().lower()
        target.status_reason = " ".join((reason or "").split())
        target.status_at = sidecar.mtime or None

    @staticmethod
    def _apply_saved_at(target: Found, content: dict[str, Any]) -> None:
        raw = content.get("saved_at")
        if raw is None:
            return
        when = None
        if isinstance(raw, str) and len(raw) <= 64:
            try:
                when = datetime.fromisoformat(raw.strip())
            except ValueError:
                when = None
        if when is None or when.tzinfo is None:
            target.reasons.append(
                f"{SIDECAR}: saved_at {str(raw)[:64]!r} ignored (an ISO 8601 instant with an offset, e.g. "
                "2026-10-28T12:00:00Z)"
            )
            return
        target.saved_at = when.timestamp()

    @staticmethod
    def _apply_run_facts(target: Found, content: dict[str, Any]) -> None:
        gpus = content.get("gpus")
        if gpus is not None:
            if isinstance(gpus, int) and not isinstance(gpus, bool) and 1 <= gpus <= MAX_GPUS:
                target.gpus = gpus
            else:
                target.reasons.append(f"{SIDECAR}: gpus {gpus!r} ignored (a whole number from 1 to {MAX_GPUS:,})")
        parent = content.get("parent")
        if parent is not None:
            ok = isinstance(parent, dict) and set(parent) <= {"team", "run", "step"}
            run, team, step = (parent.get(k) for k in ("run", "team", "step")) if ok else (None, None, None)
            ok = (
                ok
                and isinstance(run, str)
                and 0 < len(run) <= 200
                and (team is None or (isinstance(team, str) and 0 < len(team) <= 100))
                and isinstance(step, int)
                and not isinstance(step, bool)
                and step >= 0
            )
            if ok:
                target.parent = {"team": team, "run": run, "step": step}
            else:
                target.reasons.append(f'{SIDECAR}: parent ignored (an object {{"team"?, "run", "step"}})')

    @staticmethod
    def _apply(target: Found, content: dict[str, Any], listed: list[dict[str, Any]], directory: DirView) -> None:
        schema = content.get("schema")
        if schema is not None and schema != SCHEMA:
            target.reasons.append(f"{SIDECAR} declares schema {schema!r}; read as {SCHEMA}")
        for key in ("run", "team"):
            value = content.get(key)
            if isinstance(value, str) and value:
                setattr(target, key, value)
        importance = content.get("importance")
        if importance in IMPORTANCE:
            target.importance = importance
        elif importance is not None:
            target.reasons.append(f"{SIDECAR}: unknown importance {importance!r} ignored")
        SidecarFormat._apply_status(target, content, directory.files[SIDECAR])
        SidecarFormat._apply_run_facts(target, content)
        SidecarFormat._apply_saved_at(target, content)
        step = content.get("step")
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            if target.step is not None and target.step != step:
                target.reasons.append(f"{SIDECAR} says step {step}, the name says {target.step}")
            target.step = step

        for record in listed:
            relative, size = record["path"], record["size"]
            member = lookup(directory, relative)
            if member is None:
                target.fail(PARTIAL, f"{relative} is missing (listed in {SIDECAR})")
                continue
            if member.size != size:
                word = "shorter" if member.size < size else "longer"
                target.fail(CORRUPT, f"{relative} is {size_words(member.size - size)} {word} than {SIDECAR} says")
            digest = record.get("sha256")
            if isinstance(digest, str) and digest:
                digest = digest.lower()
                target.reference_checksums[member.path] = ("sha256", digest)
                if member.checksum_algo == "sha256" and member.checksum and member.checksum.lower() != digest:
                    target.fail(CORRUPT, f"{relative}: its sha256 does not match {SIDECAR}")
            if member.path not in target.files:
                target.files.append(member.path)
        target.files.sort()
        sidecar = directory.files[SIDECAR]
        target.expected_files = len(listed) + 1
        target.expected_bytes = sum(r["size"] for r in listed) + sidecar.size
