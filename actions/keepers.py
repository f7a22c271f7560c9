"""Which locked retention policies keep a checkpoint: asked by every path that can delete one (issue 27, item 9).

A locked policy protects the data it covers, not only its own settings (AWS Backup Vault Lock's model): when its
rules keep a checkpoint, deleting that checkpoint needs the same quorum as loosening the policy, the person who
asks and ``LOCKED_POLICY_QUORUM - 1`` approvers other than them (``quorum_approvals``). The deletion preview says
which policy keeps it; scheduling files the deletion as awaiting those approvals; the executor refuses it while
they are missing (``actions.execution.blocker``), as a lock placed after scheduling wins.

Retention sits above actions, so it registers the question here when Django starts (``retention.keeping``);
actions never imports it. A deletion "takes" a checkpoint when no present copy of it stays (outside the open
deletions): a copy deleted while another copy stays (a move's source once its new copy verified, a host copy
with a verified object copy) leaves the checkpoint kept, so needs no quorum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class Keeper:
    """One locked policy that keeps a checkpoint: its id, its name in words, where its page is, and which of its
    rules keep it ("among the last N", "milestone")."""

    policy_id: int
    name: str
    url: str
    why: str

    def as_dict(self) -> dict:
        return {"policy": self.policy_id, "name": self.name, "url": self.url, "why": self.why}


_askers: list[Callable[[list[int]], dict[int, list[Keeper]]]] = []


def on_keepers_asked(
    fn: Callable[[list[int]], dict[int, list[Keeper]]],
) -> Callable[[list[int]], dict[int, list[Keeper]]]:
    """Register ``fn(checkpoint_ids) -> {checkpoint id: the locked policies that keep it}``."""
    if fn not in _askers:
        _askers.append(fn)
    return fn


def keepers(checkpoint_ids: Iterable[int]) -> dict[int, list[Keeper]]:
    """{checkpoint id: the locked policies whose rules keep it} for those among ``checkpoint_ids`` that one keeps."""
    ids = sorted(set(checkpoint_ids))
    out: dict[int, list[Keeper]] = {}
    if not ids:
        return out
    for fn in _askers:
        for pk, found in fn(ids).items():
            out.setdefault(pk, []).extend(found)
    return out


def quorum() -> int:
    """How many people deleting a checkpoint a locked policy keeps takes, the one who asks included."""
    return settings.LOCKED_POLICY_QUORUM


def quorum_approvals() -> int:
    """How many approvals, each by another person than the one who asked, such a deletion needs."""
    return quorum() - 1


def names(found: Iterable[Keeper]) -> str:
    return ", ".join(f"{k.name} ({k.why})" for k in found)


def approval_reason(what: str, found: list[Keeper]) -> str:
    """Why such a deletion waits, in words: which policy keeps what, and how many people it takes."""
    n = quorum_approvals()
    approvers = "an approver" if n == 1 else f"{n} approvers"
    return (
        f"{what} is kept by the locked {names(found)}: deleting what a locked policy keeps takes {quorum()} people, "
        f"as loosening the policy does, so {approvers} other than the person who asks must approve it"
    )


def short_of_quorum(what: str, found: list[Keeper], given: int) -> str:
    """Why a deletion with ``given`` approvals must not run while ``found`` keep its checkpoint; "" when it may."""
    if not found or given >= quorum_approvals():
        return ""
    return (
        f"{what} is kept by the locked {names(found)}, and this deletion has {given} of the {quorum_approvals()} "
        "approvals that deleting what a locked policy keeps needs; cancel it and schedule it again, which asks for "
        "them"
    )
