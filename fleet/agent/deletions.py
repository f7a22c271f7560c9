"""``--deletions``: the files the server scheduled for deletion on this host, deleted (or moved to the root's
trash, purged, restored) only while still the file that was scheduled, and reported."""

from __future__ import annotations

import argparse
import collections
import errno
import os
import stat
from typing import Any

from .common import AgentError, open_dirs, os_reason, printable, stderr_warn
from .contract import DELETIONS_PATH, TRASH_DIR, path_problem
from .wire import fetch_work, report_work

_TRASH_WORDS = (("trashed", "moved to the trash"), ("purged", "purged"), ("restored", "restored"))
MTIME_TOLERANCE_NS = 2000  # the server keeps microseconds; a float round trip adds less than this


def delete_file(root: str, rel: str, size: int, mtime: float) -> tuple[str, str]:
    """Delete one frozen file below ``root`` if it is still the file that was scheduled.

    Returns (result, detail): ("deleted", ""), ("skipped", "missing: ..."), ("skipped", "changed: ...")
    when its size or mtime differ (it was written again since), ("skipped", "refused: ...") for a path
    that is not a plain relative path below the root or that leads through a symlink, or
    ("failed", why) when the operating system refused. Exactly one regular file is unlinked, never
    a directory: each directory on the way is opened without following symlinks and the file is
    unlinked relative to its directory, so no symlink swapped in meanwhile leads outside the root.
    """
    if path_problem(rel):
        return "skipped", "refused: not a plain relative path below the root"
    parts = rel.split("/")
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(root, flags)
    except OSError as exc:
        return "failed", f"cannot open the root: {os_reason(exc)}"
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, flags | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
            except FileNotFoundError:
                return "skipped", "missing: its directory is gone"
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    return "skipped", f"refused: {printable(part)} on its path is no longer a plain directory"
                return "failed", f"cannot open its directory: {os_reason(exc)}"
            os.close(fd)
            fd = child
        name = parts[-1]
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return "skipped", "missing: no such file"
        except OSError as exc:
            return "failed", f"cannot stat it: {os_reason(exc)}"
        if not stat.S_ISREG(st.st_mode):
            return "skipped", "changed: no longer a regular file"
        if st.st_size != size:
            return "skipped", f"changed: its size is {st.st_size} bytes, scheduled at {size}"
        if abs(st.st_mtime_ns - round(mtime * 1e9)) > MTIME_TOLERANCE_NS:
            return "skipped", "changed: modified since it was scheduled"
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            return "skipped", "missing: no such file"
        except OSError as exc:
            return "failed", f"cannot delete it: {os_reason(exc)}"
        return "deleted", ""
    finally:
        os.close(fd)


def _move_file(root: str, source: str, target: str, *, size: int, mtime: float | None) -> tuple[str, str]:
    """Rename one regular file below ``root`` from ``source`` to ``target`` (both plain relative paths), never
    over an existing file; with ``mtime`` the file must still have the scheduled size and mtime."""
    if path_problem(source) or path_problem(target):
        return "skipped", "refused: not a plain relative path below the root"
    src_parts, dst_parts = source.split("/"), target.split("/")
    try:
        src_fd = open_dirs(root, src_parts[:-1])
    except FileNotFoundError:
        return "skipped", "missing: its directory is gone"
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return "skipped", "refused: a directory on its path is no longer a plain directory"
        return "failed", f"cannot open its directory: {os_reason(exc)}"
    try:
        try:
            st = os.stat(src_parts[-1], dir_fd=src_fd, follow_symlinks=False)
        except FileNotFoundError:
            return "skipped", "missing: no such file"
        if not stat.S_ISREG(st.st_mode):
            return "skipped", "changed: no longer a regular file"
        if st.st_size != size:
            return "skipped", f"changed: its size is {st.st_size} bytes, scheduled at {size}"
        if mtime is not None and abs(st.st_mtime_ns - round(mtime * 1e9)) > MTIME_TOLERANCE_NS:
            return "skipped", "changed: modified since it was scheduled"
        try:
            dst_fd = open_dirs(root, dst_parts[:-1], create=True)
        except OSError as exc:
            return "failed", f"cannot make its target directory: {os_reason(exc)}"
        try:
            try:
                os.stat(dst_parts[-1], dir_fd=dst_fd, follow_symlinks=False)
                return "skipped", "refused: something else is at that path now"
            except FileNotFoundError:
                pass
            try:
                os.rename(src_parts[-1], dst_parts[-1], src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            except OSError as exc:
                return "failed", f"cannot move it: {os_reason(exc)}"
        finally:
            os.close(dst_fd)
        return "moved", ""
    except OSError as exc:
        return "failed", f"cannot stat it: {os_reason(exc)}"
    finally:
        os.close(src_fd)


def trash_file(root: str, rel: str, trash_rel: str, size: int, mtime: float) -> tuple[str, str]:
    """Move one frozen file into the root's trash (a rename on the same filesystem) if it is still the file
    that was scheduled: ("trashed", ""), or ("skipped"/"failed", why) as ``delete_file`` says them."""
    if not trash_rel.startswith(TRASH_DIR + "/"):
        return "skipped", "refused: the trash path is not in the root's trash"
    result, detail = _move_file(root, rel, trash_rel, size=size, mtime=mtime)
    return ("trashed", "") if result == "moved" else (result, detail)


def restore_file(root: str, rel: str, trash_rel: str, size: int) -> tuple[str, str]:
    """Move a trashed file back where it was, refusing when something else is at that path now."""
    if not trash_rel.startswith(TRASH_DIR + "/"):
        return "skipped", "refused: the trash path is not in the root's trash"
    result, detail = _move_file(root, trash_rel, rel, size=size, mtime=None)
    return ("restored", "") if result == "moved" else (result, detail)


def purge_file(root: str, trash_rel: str, size: int, mtime: float) -> tuple[str, str]:
    """Delete a trashed file for good (its window ended): "purged", or "skipped" when it is gone already."""
    if not trash_rel.startswith(TRASH_DIR + "/"):
        return "skipped", "refused: the trash path is not in the root's trash"
    result, detail = delete_file(root, trash_rel, size, mtime)
    if result == "deleted":
        return "purged", ""
    return ("skipped", f"purged already: {detail}") if detail.startswith("missing") else (result, detail)


def do_deletion_item(root: str, item: dict[str, Any]) -> tuple[str, str]:
    """Carry out one item of the server's deletion work by its ``action`` (delete when absent: wire format 1)."""
    action = item.get("action", "delete")
    size, mtime = int(item["size"]), float(item["mtime"])
    if action == "delete":
        return delete_file(root, item["path"], size, mtime)
    trash_rel = item.get("trash_path")
    if not isinstance(trash_rel, str):
        return "skipped", "refused: the server sent no trash path"
    if action == "trash":
        return trash_file(root, item["path"], trash_rel, size, mtime)
    if action == "purge":
        return purge_file(root, trash_rel, size, mtime)
    if action == "restore":
        return restore_file(root, item["path"], trash_rel, size)
    return "skipped", f"refused: unknown action {printable(str(action))[:40]}"


def fetch_deletions(server: str, token: str, root: str, *, timeout: float = 60.0) -> list[dict[str, Any]]:
    """The pending files of this host's running deletion jobs below ``root``."""
    return fetch_work(DELETIONS_PATH, server, token, root, timeout=timeout, extra={"can": "trash"})["items"]


def report_deletions(server: str, token: str, results: list[dict[str, Any]], *, timeout: float = 60.0) -> dict:
    return report_work(DELETIONS_PATH, server, token, results, timeout=timeout)


def delete_root(args: argparse.Namespace, root: str, server: str, token: str) -> bool:
    """Delete this root's scheduled files and report each; True when none failed."""
    label = f"{args.host}:{root}"
    tried: set[int | None] = set()
    counts: collections.Counter[str] = collections.Counter()
    try:
        while True:
            items = [i for i in fetch_deletions(server, token, root, timeout=args.timeout) if i.get("id") not in tried]
            if not items:
                break
            results = []
            for item in items:
                tried.add(item.get("id"))
                if item.get("root") != root:
                    result, detail = "skipped", "refused: the item is not below this root"
                else:
                    try:
                        result, detail = do_deletion_item(root, item)
                    except (KeyError, TypeError, ValueError):
                        result, detail = "skipped", "refused: the server sent an incomplete item"
                counts[result] += 1
                if result not in ("deleted", "trashed", "purged", "restored"):
                    stderr_warn(f"{label}: {printable(str(item.get('path')))}: {result}: {detail}")
                results.append({"id": item.get("id"), "result": result, "detail": detail})
            report_deletions(server, token, results, timeout=args.timeout)
    except AgentError as exc:
        raise AgentError(f"{label}: {exc}", fatal=exc.fatal) from None
    print(
        f"{label}: {counts['deleted']} deleted, "
        + "".join(f"{counts[k]} {word}, " for k, word in _TRASH_WORDS if counts[k])
        + f"{counts['skipped']} skipped, {counts['failed']} failed",
        flush=True,
    )
    return counts["failed"] == 0
