#!/usr/bin/env python3
"""Build the host agent (the package fleet/agent/) into the one file the GPU hosts run: a zipapp.

    python3 scripts/build_agent.py [--output dist/ckptfleet-agent.pyz]     # what `make agent` runs

The file is a zip of the package's modules, as they are in the checkout, under the name ``ckptfleet_agent``
(its imports are relative), with a ``__main__.py`` that runs its command line and a ``#!/usr/bin/env python3``
line before it: ``python3 ckptfleet-agent.pyz --root ...`` (or ``./ckptfleet-agent.pyz``) runs on any Python
3.8 or newer with nothing installed. A zipapp rather than a script that pastes the modules together: Python
imports it as it is, so the hosts run the very modules the tests import, each under its own name (no two
modules' private names can meet), and the tracebacks name the module and line of the checkout.

The build is reproducible: the same sources give the same bytes, whenever and wherever they were checked out
(members in name order, a fixed timestamp and mode, stored rather than deflated so that no zlib's choices
enter). Standard library only, so that it needs no virtualenv.
"""

from __future__ import annotations

import argparse
import os
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "fleet" / "agent"
OUTPUT = ROOT / "dist" / "ckptfleet-agent.pyz"
PACKAGE = "ckptfleet_agent"  # its name inside the file: not "fleet", which is the server's
SHEBANG = b"#!/usr/bin/env python3\n"
MAIN = f"""\
# The host agent of Checkpoint Fleet, built by scripts/build_agent.py from fleet/agent/. Run it: python3 this-file
import sys

from {PACKAGE}.cli import main

sys.exit(main())
"""
EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest a zip can say: no build's clock enters the file


def members(source: Path) -> list[tuple[str, bytes]]:
    """(name in the zip, content) of each module of the package, and the ``__main__.py``, in name order."""
    found = [(f"{PACKAGE}/{path.name}", path.read_bytes()) for path in sorted(source.glob("*.py"))]
    if not any(name.endswith("/cli.py") for name, _ in found):
        raise SystemExit(f"build_agent: {source} holds no cli.py: not the agent's package")
    return sorted([("__main__.py", MAIN.encode()), *found])


def build(output: Path, source: Path = SOURCE) -> Path:
    """Write the agent's single file to ``output`` (executable), replacing it only once it is whole."""
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.partial")
    with open(partial, "wb") as f:
        f.write(SHEBANG)
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as archive:
            for name, data in members(source):
                info = zipfile.ZipInfo(name, date_time=EPOCH)
                info.create_system = 3  # Unix, whichever system builds it
                info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
                archive.writestr(info, data)
    os.chmod(partial, 0o755)  # noqa: S103  # nosec B103 - a program, to run as ./ckptfleet-agent.pyz
    os.replace(partial, output)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="default: %(default)s")
    parser.add_argument("--source", type=Path, default=SOURCE, help="the package to build (default: %(default)s)")
    args = parser.parse_args(argv)
    path = build(args.output, args.source)
    print(f"build_agent: {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
