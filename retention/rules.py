"""The keep-rule engine: which checkpoints of one run a set of retention rules keeps, and why.

Pure and deterministic: plain data in, plain data out, no database. The simulator, the policy
dry run and the policy task all call ``apply_rules``, so what a user previews is what a policy
proposes.

Rules, each optional except the promises:

- **pinned** and **held** checkpoints are always kept (PRODUCT.md promises 1 and 2);
- the run's **newest restorable** checkpoint is always kept (promise 5; ``catalog.recovery.
  newest_restorable_ids``: the newest complete and verified one, or failing that the newest complete
  one that nothing says is wrong);
- a **disputed** checkpoint (a present copy's checksums differ from another's and nothing independent
  says which is right) is always kept: a policy never deletes or demotes what it cannot positively
  identify (promise 12);
- **keep last N**: the N stepped checkpoints with the highest steps;
- **keep every Mth step**: checkpoints whose step is a multiple of M (Orbax's ``keep_period``);
- **keep milestones**, **keep critical**: by the importance the training job wrote;
- **keep step-less**: checkpoints saved under a name instead of a step (a final export,
  ``last.ckpt``), which "last N" and "every Mth" cannot rank.

**Transient** checkpoints (the training job's word for a save it does not mean to keep, such as a
preemption save between its routine ones) are kept by the promises alone: held, pinned, the run's
newest restorable one, disputed, not positively identified. No keep rule keeps them: "last N" counts
the N highest steps among the run's other stepped checkpoints (so transient saves never push a routine
one out of the last N), and neither "every Mth step" nor "step-less" keeps a transient one. They are
the first a policy offers to remove: ``Plan.dropped`` lists them before the other dropped checkpoints
(each group newest first), and the simulator and a policy's proposals follow that order.

A checkpoint no rule keeps is dropped, with the reason in words.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from catalog.choices import Importance


class Reason(StrEnum):
    """Why a checkpoint is kept. Promises first: they hold whatever the rules say."""

    HELD = "held"
    PINNED = "pinned"
    NEWEST_RESTORABLE = "newest_restorable"
    DISPUTED = "disputed"
    NOT_IDENTIFIED = "not_identified"
    CRITICAL = "critical"
    MILESTONE = "milestone"
    LAST_N = "last_n"
    EVERY_MTH = "every_mth"
    STEPLESS = "stepless"
    LOCKED_POLICY = "locked_policy"

    @property
    def label(self) -> str:
        return REASON_LABELS[self]

    @property
    def is_promise(self) -> bool:
        return self in PROMISES


REASON_LABELS = {
    Reason.HELD: "held (legal or compliance hold)",
    Reason.PINNED: "pinned",
    Reason.NEWEST_RESTORABLE: "the run's newest restorable checkpoint",
    Reason.DISPUTED: "disputed: its copies disagree and nothing independent says which is right",
    Reason.NOT_IDENTIFIED: "not positively identified: an unknown layout, or a location whose inventory is stale or "
    "failed",
    Reason.CRITICAL: "critical",
    Reason.MILESTONE: "milestone",
    Reason.LAST_N: "among the last N",
    Reason.EVERY_MTH: "step is a multiple of M",
    Reason.STEPLESS: "saved without a step (an export)",
    Reason.LOCKED_POLICY: "a locked policy keeps it",
}
PROMISES = frozenset({Reason.HELD, Reason.PINNED, Reason.NEWEST_RESTORABLE, Reason.DISPUTED, Reason.NOT_IDENTIFIED})
_IMPORTANCE_LABELS = {value: label.lower() for value, label in Importance.choices}


@dataclass(frozen=True)
class CopyFacts:
    """What one present copy of a checkpoint holds on one tier and storage class (``CopyTierUsage``)."""

    copy_id: int
    location_id: int
    tier: str
    storage_class: str
    bytes: int
    files: int = 0
    days_stored: int = 0


@dataclass(frozen=True)
class CheckpointFacts:
    """One checkpoint of a run, as the rules see it."""

    id: int
    step: int | None
    tag: str = ""
    importance: str = Importance.ROUTINE
    pinned: bool = False
    held: bool = False
    newest_restorable: bool = False
    disputed: bool = False  # a present copy is disputed: never proposed for deletion or demotion (promise 12)
    unidentified: bool = False  # an unknown layout, or stale or failed evidence: never proposed either (promise 12)
    scheduled: bool = False  # an open deletion job exists: dropped already, never proposed again
    copies: tuple[CopyFacts, ...] = ()

    @property
    def label(self) -> str:
        return f"step {self.step}" if self.step is not None else self.tag

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.copies)

    @property
    def transient(self) -> bool:
        return self.importance == Importance.TRANSIENT


@dataclass(frozen=True)
class KeepRules:
    """A set of keep rules. 0 switches "last N" and "every Mth" off."""

    keep_last: int = 0
    keep_every: int = 0
    keep_milestones: bool = True
    keep_critical: bool = True
    keep_stepless: bool = True

    def __post_init__(self) -> None:
        for name in ("keep_last", "keep_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a whole number, zero or more")

    def describe(self) -> str:
        parts = []
        if self.keep_last:
            parts.append(f"the last {self.keep_last}")
        if self.keep_every:
            parts.append(f"every step that is a multiple of {self.keep_every:,}")
        if self.keep_milestones:
            parts.append("milestones")
        if self.keep_critical:
            parts.append("critical checkpoints")
        if self.keep_stepless:
            parts.append("step-less exports")
        parts.append("pinned, held and disputed checkpoints and the newest restorable one (always)")
        parts.append("transient checkpoints only where one of those promises requires it")
        return "Keep " + ", ".join(parts)


@dataclass(frozen=True)
class Decision:
    """A checkpoint kept (with every rule that keeps it) or dropped (with why no rule does)."""

    checkpoint: CheckpointFacts
    reasons: tuple[Reason, ...] = ()
    why_dropped: str = ""
    kept_by: tuple[str, ...] = ()  # the locked policies whose rules keep it (``apply_rules``' ``binding``)

    @property
    def kept(self) -> bool:
        return bool(self.reasons)

    @property
    def reason_labels(self) -> list[str]:
        return [
            f"kept by the locked {', '.join(self.kept_by)}" if r == Reason.LOCKED_POLICY else r.label
            for r in self.reasons
        ]


@dataclass(frozen=True)
class Plan:
    """The decisions for one run, newest first: kept and dropped, and every decision in order."""

    decisions: tuple[Decision, ...] = field(default_factory=tuple)

    @property
    def kept(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.kept)

    @property
    def dropped(self) -> tuple[Decision, ...]:
        """Dropped checkpoints in the order a policy offers them: transient ones first, then the rest, newest first."""
        return tuple(sorted((d for d in self.decisions if not d.kept), key=lambda d: not d.checkpoint.transient))

    @property
    def in_offer_order(self) -> tuple[Decision, ...]:
        """Every decision for a list: the dropped ones in the order a policy offers them, then the kept ones."""
        return (*self.dropped, *self.kept)

    @property
    def kept_ids(self) -> frozenset[int]:
        return frozenset(d.checkpoint.id for d in self.kept)

    @property
    def dropped_ids(self) -> frozenset[int]:
        return frozenset(d.checkpoint.id for d in self.dropped)


def newest_first(checkpoints: Iterable[CheckpointFacts]) -> list[CheckpointFacts]:
    """Stepped checkpoints by step, highest first, then step-less ones by tag; ids break ties."""
    return sorted(checkpoints, key=lambda c: (c.step is None, -(c.step or 0), c.tag, c.id))


def _why_dropped(c: CheckpointFacts, rules: KeepRules) -> str:
    if c.transient:
        return "transient: kept only where a promise requires it (held, pinned, the newest restorable, disputed)"
    why = []
    if c.step is None:
        why.append("step-less exports are not kept")
    else:
        if rules.keep_last:
            why.append(f"older than the last {rules.keep_last}")
        if rules.keep_every:
            why.append(f"step {c.step:,} is not a multiple of {rules.keep_every:,}")
    if c.importance == Importance.MILESTONE:
        why.append("milestones are not kept")
    elif c.importance == Importance.CRITICAL:
        why.append("critical checkpoints are not kept")
    else:
        why.append(f"{_IMPORTANCE_LABELS.get(c.importance, 'routine')} importance")
    return "; ".join(why)


def apply_rules(
    checkpoints: Iterable[CheckpointFacts], rules: KeepRules, binding: Iterable[tuple[str, KeepRules]] = ()
) -> Plan:
    """Decide, for the checkpoints of one run, which ``rules`` keep and which they drop.

    ``binding``: the locked policies that cover this run, as (name, rules). A lock promises that its checkpoints
    are kept whichever other policy (a run's, a team's) is applied to the run, so the strictest keep wins: what
    any of them keeps is kept (``Reason.LOCKED_POLICY``, naming them in ``Decision.kept_by``), and a policy that
    keeps less cannot walk a run out of a locked one (issue 26: a run policy keeping 1 under a locked team policy
    keeping 11 proposed 11 of 12 deletions).
    """
    checkpoints = list(checkpoints)
    locks: dict[int, list[str]] = {}
    for name, locked in binding:
        for d in apply_rules(checkpoints, locked).kept:
            if set(d.reasons) - PROMISES:  # the promises keep it anyway, whoever's policy it is
                locks.setdefault(d.checkpoint.id, []).append(name)
    plan = _apply(checkpoints, rules)
    if not locks:
        return plan
    decisions = []
    for d in plan.decisions:
        names = tuple(dict.fromkeys(locks.get(d.checkpoint.id, ())))
        if names:
            d = Decision(d.checkpoint, (*d.reasons, Reason.LOCKED_POLICY), "", names)
        decisions.append(d)
    return Plan(tuple(decisions))


def _apply(checkpoints: Iterable[CheckpointFacts], rules: KeepRules) -> Plan:
    ordered = newest_first(checkpoints)
    ids = [c.id for c in ordered]
    if len(set(ids)) != len(ids):
        raise ValueError("a checkpoint appears twice")
    # Transient saves are kept by the promises alone, so they neither take nor count towards a place in the last N.
    last_n = {c.id for c in [c for c in ordered if c.step is not None and not c.transient][: rules.keep_last]}
    decisions = []
    for c in ordered:
        reasons = []
        if c.held:
            reasons.append(Reason.HELD)
        if c.pinned:
            reasons.append(Reason.PINNED)
        if c.newest_restorable:
            reasons.append(Reason.NEWEST_RESTORABLE)
        if c.disputed:
            reasons.append(Reason.DISPUTED)
        if c.unidentified:
            reasons.append(Reason.NOT_IDENTIFIED)
        if rules.keep_critical and c.importance == Importance.CRITICAL:
            reasons.append(Reason.CRITICAL)
        if rules.keep_milestones and c.importance == Importance.MILESTONE:
            reasons.append(Reason.MILESTONE)
        if c.id in last_n:
            reasons.append(Reason.LAST_N)
        if rules.keep_every and c.step is not None and c.step % rules.keep_every == 0 and not c.transient:
            reasons.append(Reason.EVERY_MTH)
        if rules.keep_stepless and c.step is None and not c.transient:
            reasons.append(Reason.STEPLESS)
        decisions.append(Decision(c, tuple(reasons), "" if reasons else _why_dropped(c, rules)))
    return Plan(tuple(decisions))


def loosenings(before: KeepRules, after: KeepRules) -> list[str]:
    """How ``after`` keeps less than ``before``, in words, one line per rule; empty when it keeps at least as much.

    The rules keep the union of what each keeps, so ``after`` keeps a superset of ``before`` for every run
    when each rule on its own does:

    - **keep last N**: the N highest steps; a larger N keeps those and more, so N may only grow;
    - **keep every Mth step**: the multiples of M. Off (0) keeps none of them, so any M is stricter
      than off. Between two values, the multiples of M' include every multiple of M exactly when M'
      divides M (every 1,000th becomes every 500th: stricter; every 1,000th becomes every 2,000th:
      looser, it drops step 1,000). Switching it off from a value is looser;
    - **keep milestones / critical / step-less**: on keeps a class that off does not, so on may not
      turn off.

    Being enabled is not a rule: a disabled policy proposes nothing (``policy_propose``), and a run's
    disabled policy still keeps its team's policy off that run (``policy_scope``), so disabling never
    loosens; the callers compare it themselves (``retention.services.deletes_more``).
    """
    out = []
    if after.keep_last < before.keep_last:
        out.append(f"keep the last {after.keep_last} instead of {before.keep_last}")
    if before.keep_every:
        if not after.keep_every:
            out.append(f"stop keeping every step that is a multiple of {before.keep_every:,}")
        elif before.keep_every % after.keep_every:
            out.append(
                f"keep multiples of {after.keep_every:,} instead of {before.keep_every:,}, which drops step "
                f"{before.keep_every:,}"
            )
    for name, what in (
        ("keep_milestones", "milestones"),
        ("keep_critical", "critical checkpoints"),
        ("keep_stepless", "step-less exports"),
    ):
        if getattr(before, name) and not getattr(after, name):
            out.append(f"stop keeping {what}")
    return out
