"""Every row lock the product takes names the rows it locks.

``select_for_update()`` without ``of`` locks every row its query joins, and a model's default ordering joins without
a word in the call: ``UsageCursor`` orders by its location, so locking a cursor with ``.first()`` locked the
location ``FOR UPDATE`` too, and a deletion being scheduled there deadlocked with the usage rollup (the foreign keys
of its items take a key-share lock on the location at commit). So every call says ``of=("self", ...)``, or is the
locations' own ``StorageLocation.objects.locked()`` (``FOR NO KEY UPDATE``).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("access", "actions", "approvals", "audit", "catalog", "ckptfleet", "dashboard", "fleet", "ingest")
PACKAGES += ("promotion", "retention", "spend")


def test_every_select_for_update_names_its_rows():
    unnamed = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "select_for_update"
                    and not {k.arg for k in node.keywords} & {"of", "no_key"}
                ):
                    unnamed.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not unnamed, "select_for_update() without of=(...): " + ", ".join(unnamed)
