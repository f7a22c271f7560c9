"""Every shell block the docs show parses: a reader who pastes one gets the commands it shows, not a syntax error.

The fenced ``sh``, ``bash``, ``shell`` and ``console`` blocks of README.md and of every page of docs/
(``tests.docs.readme_commands.shell_blocks``) are given to ``bash -n``, which parses without running anything. A
``console`` block is a session: its ``$ `` lines (the prompt stripped) and their continuation lines are the
commands, every other line is output and is not parsed. Whether the commands then work is
``test_readme_commands``'s question.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.docs.readme_commands import README, Block, script_of, shell_blocks

BLOCKS = shell_blocks()


def _bash_n(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, timeout=30)


def test_the_docs_show_shell_blocks():
    where = {block.path.name for block in BLOCKS}
    assert len(BLOCKS) > 20
    assert {"README.md", "agent.md", "operators.md", "production.md"} <= where
    # Blocks inside list items are indented; they count too (the run status calls of platform-teams.md).
    assert any(block.path.name == "platform-teams.md" and "runs/status/" in block.text for block in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_the_shell_block_parses(block: Block):
    done = _bash_n(script_of(block))
    assert done.returncode == 0, f"{block.where}: bash -n refuses the {block.lang} block:\n{done.stderr}"


def test_a_console_block_is_its_prompted_lines_without_the_output():
    block = Block(
        README,
        1,
        "console",
        "$ python manage.py fleet_bucket list \\\n    --verbose\nNAME  SCHEDULE  (output: not parsed)\n"
        "ckpt-eu  60 min   ( unbalanced\n$ echo done\ndone\n",
    )
    assert script_of(block) == "python manage.py fleet_bucket list \\\n    --verbose\necho done\n"
    assert _bash_n(script_of(block)).returncode == 0


def test_a_block_that_does_not_parse_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        'Text.\n\n- an item:\n\n  ```bash\n  if true; then echo unfinished\n  ```\n\n```json\n{"not": shell\n```\n'
    )
    [block] = shell_blocks([page])
    assert (block.line, block.lang) == (5, "bash")
    assert _bash_n(script_of(block)).returncode != 0
