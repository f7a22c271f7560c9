"""Single-file checkpoints: ``.ckpt`` / ``.pt`` / ``.pth`` / ``.safetensors`` / ``.nemo`` files that no
directory format claimed (Lightning ``epoch=0-step=100.ckpt``, Composer ``ep1-ba500-rank0.pt``, a bare
``torch.save``).

Each file is its own checkpoint (``Found.path`` is the file). Judgement: a torch.save zip must have its
end record and a legacy pickle must end with ``.`` (else corrupt); a safetensors file must be exactly as
long as its header says (else corrupt). Lightning saves atomically through ``<name>.ckpt.<random>.tmp``,
so such a file is a temporary left-over of an interrupted save; so is a checkpoint with NeMo's
``-unfinished`` marker beside it.
"""

from __future__ import annotations

import re

from catalog.formats.base import PARTIAL, CheckpointFormat, DirView, Found
from catalog.formats.common import (
    check_safetensors,
    check_torch_file,
    mark_unfinished,
    step_from_name,
)

EXTENSIONS = (".ckpt", ".pt", ".pth", ".safetensors", ".nemo")
_TMP = re.compile(r"^(?P<base>.+\.(?:ckpt|pt|pth))\.[^/]+\.tmp$")


class SingleFileFormat(CheckpointFormat):
    """One Found per checkpoint file in the directory; the lowest priority of all formats."""

    name = "single_file"
    label = "Single file"
    priority = 90

    def claim(self, directory: DirView) -> list[Found]:
        results = []
        for name, entry in sorted(directory.files.items()):
            tmp = _TMP.match(name)
            if tmp:
                found = Found(
                    path=entry.path,
                    format=self.name,
                    step=step_from_name(tmp["base"]),
                    files=[entry.path],
                    temporary=True,
                )
                found.fail(PARTIAL, f"interrupted save: {name} was never renamed to {tmp['base']}")
                results.append(found)
                continue
            if not name.endswith(EXTENSIONS):
                continue
            found = Found(path=entry.path, format=self.name, step=step_from_name(name), files=[entry.path])
            found.expected_files = 1
            if name.endswith(".safetensors"):
                check_safetensors(found, entry, name)
            elif not name.endswith(".nemo"):  # .nemo is a tar archive; the agent reads no facts from it
                check_torch_file(found, entry, name)
            mark_unfinished(found, directory, name)
            results.append(found)
        return results
