"""The commands of README.md's shell blocks, as a reader would paste them: continuation lines joined,
comments dropped, and nothing else changed (the test says what it substitutes, and why)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
PROGRAMS = ("python manage.py ", "ckptfleet-agent ", "curl ")
_BLOCK = re.compile(r"^[ \t]*```(?:sh|bash|shell)\n(.*?)^[ \t]*```", re.M | re.S)


def _strip_comment(line: str) -> str:
    """``line`` without a trailing ``# comment`` outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def shell_lines(text: str | None = None) -> list[str]:
    """Every command line of the README's sh blocks, in order, continuations joined."""
    text = README.read_text() if text is None else text
    lines: list[str] = []
    for block in _BLOCK.findall(text):
        pending = ""
        for raw in block.splitlines():
            line = _strip_comment(raw) if not pending or not raw.lstrip().startswith("#") else ""
            if line.endswith("\\"):
                pending += line[:-1].rstrip() + " "
                continue
            line = (pending + line.strip()).strip()
            pending = ""
            if line:
                lines.append(line)
    return lines


def commands(text: str | None = None) -> list[str]:
    """The README's ``python manage.py``, ``ckptfleet-agent`` and ``curl`` commands, and its ``export``s."""
    return [c for c in shell_lines(text) if c.startswith((*PROGRAMS, "export "))]
