"""The commands of the docs' shell blocks (README.md, then every page of docs/), as a reader would paste them:
continuation lines joined, comments dropped, and nothing else changed (the test says what it substitutes, and why).

Also every fenced shell block itself (``sh``, ``bash``, ``shell``, ``console``), with where it stands, for the
test that each one parses."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PROGRAMS = ("python manage.py ", "ckptfleet-agent ", "curl ")
SHELL_LANGUAGES = ("sh", "bash", "shell", "console")
# A fence may be indented (a block inside a list item); its info string may carry more after the language.
_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[A-Za-z0-9_+-]*)[^\n`]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)


@dataclass(frozen=True)
class Block:
    """One fenced shell block: the file, the line of its opening fence, its language and its text (dedented)."""

    path: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _nav_pages(entries: object) -> list[str]:
    """The page paths of mkdocs.yml's ``nav``, in the order the site shows them."""
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in _nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in _nav_pages(value)]
    return []


def documents() -> list[Path]:
    """Where a reader finds commands to paste: README.md, then the pages of docs/ in the site's order (mkdocs.yml's
    nav: the API tokens page, whose ``api_token revoke`` ends the test's token, comes after the pages that use
    it), then any page the nav does not list."""
    nav = [DOCS / page for page in _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])]
    return [README, *nav, *sorted(set(DOCS.rglob("*.md")) - set(nav))]


def shell_blocks(paths: list[Path] | None = None) -> list[Block]:
    """Every fenced ``sh``/``bash``/``shell``/``console`` block of ``paths`` (default: ``documents()``)."""
    found = []
    for path in documents() if paths is None else paths:
        text = path.read_text()
        for match in _FENCE.finditer(text):
            if match.group("lang") in SHELL_LANGUAGES:
                line = text.count("\n", 0, match.start()) + 1
                found.append(Block(path, line, match.group("lang"), textwrap.dedent(match.group("body"))))
    return found


def script_of(block: Block) -> str:
    """The shell text a block asks bash to run: a ``console`` block's ``$ `` lines (prompt stripped) and their
    continuation lines, without the output lines between them; any other block as it stands."""
    if block.lang != "console":
        return block.text
    lines, continuing = [], False
    for raw in block.text.splitlines():
        if continuing:
            lines.append(raw)
        elif raw.startswith("$ ") or raw == "$":
            lines.append(raw[2:])
        else:
            continue  # output
        continuing = raw.rstrip().endswith("\\")
    return "\n".join(lines) + "\n"


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
    """Every command line of the shell blocks, in order, continuations joined: of ``text`` when given, else of the
    README and every docs page (``documents()``)."""
    if text is None:
        scripts = [script_of(block) for block in shell_blocks()]
    else:
        scripts = [
            script_of(Block(README, 0, m.group("lang"), textwrap.dedent(m.group("body"))))
            for m in _FENCE.finditer(text)
            if m.group("lang") in SHELL_LANGUAGES
        ]
    lines: list[str] = []
    for script in scripts:
        pending = ""
        for raw in script.splitlines():
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
    """The docs' ``python manage.py``, ``ckptfleet-agent`` and ``curl`` commands, and their ``export``s."""
    return [c for c in shell_lines(text) if c.startswith((*PROGRAMS, "export "))]
