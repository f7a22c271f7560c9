"""What every part of the agent reports with: its one error type, one-line messages, paths fit for a terminal,
the reason of an OSError, sizes in words, and directories opened below a root without following a symlink."""

from __future__ import annotations

import os
import re
import ssl
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from .contract import PROG

HASH_BLOCK = 1024 * 1024
MIB = 1024 * 1024


if TYPE_CHECKING:  # only in annotations: subscripting abc.Callable fails at run time before 3.9
    Warn = Callable[[str], None]


class AgentError(Exception):
    """A failure explained in one line. ``fatal`` ones (no server, bad token) stop the other roots too."""

    def __init__(self, message: str, *, fatal: bool = False) -> None:
        super().__init__(message)
        self.fatal = fatal


def one_line(text: object, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def printable(path: str) -> str:
    """A path as it can safely be shown on a terminal: undecodable bytes and controls escaped."""
    text = path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", text)


def stderr_warn(message: str) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def os_reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return one_line(getattr(exc, "verify_message", None) or exc.reason or exc)
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return one_line(exc) or type(exc).__name__


def human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            break
    return f"{value:.1f} {unit}"


def open_dirs(root: str, parts: list[str], *, create: bool = False) -> int:
    """Open the directory ``root/parts...`` without following any symlink (creating missing ones when
    ``create``); returns its fd. Raises FileNotFoundError, or OSError (ELOOP/ENOTDIR for a symlink or file)."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    fd = os.open(root, flags)
    try:
        for part in parts:
            if create:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                except FileExistsError:
                    pass
            child = os.open(part, flags | getattr(os, "O_NOFOLLOW", 0), dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd
