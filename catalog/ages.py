"""How old a checkpoint is: from when it was saved, never from when the catalog happened to find it (issue 27, item 7).

A new install, or a bucket registered today, holds checkpoints saved months ago; counting their age from when the
catalog first saw them made "move checkpoints older than 30 days" match nothing for 30 days. So every age counts
from ``Checkpoint.saved_at``, the best evidence of the save's own time seen so far, in this order:

1. the sidecar's ``saved_at`` (``catalog.formats.sidecar``): what the training job wrote, which survives copying;
2. the files' modification time, as the agent reports it (hosts), or the objects' LastModified (buckets): the
   newest file of a copy is when that copy was finished, so the earliest such time over its copies is the save
   (a copy made later, an upload to a bucket, is younger than the save, never older);
3. when the catalog first saw it, only when none of those is known (``saved_source`` NULL), and the pages say so.

The ingest keeps it (``catalog.services.Judge``), catalog migration 0025 filled it in from what was stored.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import F
from django.db.models.functions import Coalesce

from catalog.choices import SavedSource

# Best first: a later ingest replaces a saved time only with one from a better source, or an earlier one of the
# same source (another copy's files, older than those seen so far).
RANK = {SavedSource.SIDECAR: 3, SavedSource.MTIME: 2, SavedSource.LAST_MODIFIED: 2}


def saved_or_seen(prefix: str = "") -> Coalesce:
    """The expression of a checkpoint's age origin (``prefix``: the path to the checkpoint, e.g. ``checkpoints__``)."""
    return Coalesce(F(f"{prefix}saved_at"), F(f"{prefix}first_seen_at"))


def better(current: tuple[datetime | None, str | None], offered: tuple[datetime | None, str]) -> bool:
    """Whether ``offered`` (time, source) should replace the ``current`` saved time of a checkpoint."""
    when, source = offered
    if when is None:
        return False
    now_when, now_source = current
    if now_when is None:
        return True
    rank, now_rank = RANK.get(source, 0), RANK.get(now_source or "", 0)
    if rank != now_rank:
        return rank > now_rank
    if source == SavedSource.SIDECAR:
        return when != now_when  # the job's own word: its latest sidecar says when
    return when < now_when
