"""What each kind of change request does when approved, registered by the app that owns its target.

Approvals sit low in the house (below fleet), so that any app above may ask for a second person; they
never import the apps that own the targets. Each such app registers its kinds when Django starts
(its ``AppConfig.ready``): how to apply a change, how to say it in words, who may see its target,
and where the target's page is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckptfleet.errors import DomainError

if TYPE_CHECKING:
    from approvals.models import ChangeRequest
    from audit.actor import Actor


@dataclass(frozen=True)
class Applied:
    """What applying a change did, for its audit event: the action, and the target before and after."""

    action: str
    target_label: str
    before: dict
    after: dict


@dataclass(frozen=True)
class ChangeKind:
    """One kind of change: ``apply`` runs inside the approval's transaction, locks the target, checks
    afresh that the change is still what was requested and still allowed, applies it and returns what
    it did (it raises ``DomainError`` to refuse, which changes nothing). It writes no audit event: the
    approval writes one, naming both people."""

    name: str
    target_type: str
    label: str
    apply: Callable[[ChangeRequest, Actor], Applied]
    # The change in words, one line per field ("Keep the last N: 5 -> 3").
    describe: Callable[[dict], list[str]]
    # The ids of the targets ``user`` may see, as a queryset of pks, or None for all of them.
    visible_ids: Callable[[Any], Any] = field(default=lambda user: None)
    target_url: Callable[[int], str] = field(default=lambda pk: "")


_KINDS: dict[str, ChangeKind] = {}


def register(kind: ChangeKind) -> None:
    if kind.name in _KINDS and _KINDS[kind.name] != kind:
        raise RuntimeError(f"change kind {kind.name} is registered twice")
    _KINDS[kind.name] = kind


def kind_of(name: str) -> ChangeKind:
    try:
        return _KINDS[name]
    except KeyError:
        raise DomainError(f"no change of kind {name!r} is known here", code="unknown_kind") from None


def kinds() -> dict[str, ChangeKind]:
    return dict(_KINDS)
