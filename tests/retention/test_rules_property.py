"""The keep-rule engine against the rules themselves, on any run hypothesis can think of.

Each property restates one rule independently of ``apply_rules`` (the expected sets are computed
here from the facts and the rules alone) and checks the engine's kept and dropped sets against it.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.choices import Importance
from retention.rules import CheckpointFacts, KeepRules, Reason, apply_rules, loosenings


@st.composite
def runs(draw) -> list[CheckpointFacts]:
    steps = draw(st.lists(st.integers(min_value=0, max_value=5000), max_size=30, unique=True))
    tags = draw(st.lists(st.sampled_from(["final", "last", "release", "export"]), max_size=3, unique=True))
    keys: list[tuple[int | None, str]] = [(s, "") for s in steps] + [(None, t) for t in tags]
    ids = draw(st.permutations(range(1, len(keys) + 1)))
    out = []
    for (step, tag), pk in zip(keys, ids, strict=True):
        out.append(
            CheckpointFacts(
                id=pk,
                step=step,
                tag=tag,
                importance=draw(st.sampled_from(Importance.values)),
                pinned=draw(st.booleans()) and draw(st.booleans()),
                held=draw(st.booleans()) and draw(st.booleans()),
                scheduled=draw(st.booleans()) and draw(st.booleans()),
            )
        )
    if out and draw(st.booleans()):
        chosen = draw(st.sampled_from(out))
        out = [CheckpointFacts(**{**c.__dict__, "newest_restorable": c.id == chosen.id}) for c in out]
    return out


rule_sets = st.builds(
    KeepRules,
    keep_last=st.integers(min_value=0, max_value=12),
    keep_every=st.sampled_from([0, 1, 2, 3, 10, 100, 1000]),
    keep_milestones=st.booleans(),
    keep_critical=st.booleans(),
    keep_stepless=st.booleans(),
)


def expected_keep(checkpoints: list[CheckpointFacts], rules: KeepRules) -> set[int]:
    """The kept set, worked out rule by rule without the engine. Transient checkpoints: by the promises alone."""
    stepped = sorted(
        (c for c in checkpoints if c.step is not None and c.importance != "transient"),
        key=lambda c: c.step,
        reverse=True,
    )
    keep = {c.id for c in stepped[: rules.keep_last]}
    for c in checkpoints:
        if c.held or c.pinned or c.newest_restorable:
            keep.add(c.id)
        if c.importance == "transient":
            continue
        if rules.keep_critical and c.importance == "critical":
            keep.add(c.id)
        if rules.keep_milestones and c.importance == "milestone":
            keep.add(c.id)
        if rules.keep_every and c.step is not None and c.step % rules.keep_every == 0:
            keep.add(c.id)
        if rules.keep_stepless and c.step is None:
            keep.add(c.id)
    return keep


@settings(max_examples=400, deadline=None)
@given(runs(), rule_sets)
def test_the_kept_set_is_exactly_what_the_rules_keep(checkpoints, rules):
    plan = apply_rules(checkpoints, rules)
    assert plan.kept_ids == expected_keep(checkpoints, rules)
    assert plan.kept_ids | plan.dropped_ids == {c.id for c in checkpoints}
    assert not plan.kept_ids & plan.dropped_ids


@settings(max_examples=300, deadline=None)
@given(runs(), rule_sets)
def test_the_promises_are_never_dropped(checkpoints, rules):
    plan = apply_rules(checkpoints, rules)
    for d in plan.dropped:
        c = d.checkpoint
        assert not (c.held or c.pinned or c.newest_restorable)
        assert d.why_dropped
    for d in plan.kept:
        c = d.checkpoint
        assert (Reason.HELD in d.reasons) == c.held
        assert (Reason.PINNED in d.reasons) == c.pinned
        assert (Reason.NEWEST_RESTORABLE in d.reasons) == c.newest_restorable


@settings(max_examples=300, deadline=None)
@given(runs(), rule_sets)
def test_exactly_the_last_n_are_kept_as_last_n(checkpoints, rules):
    plan = apply_rules(checkpoints, rules)
    as_last = [d.checkpoint for d in plan.kept if Reason.LAST_N in d.reasons]
    stepped = [c for c in checkpoints if c.step is not None and c.importance != "transient"]
    assert len(as_last) == min(rules.keep_last, len(stepped))
    if as_last:
        lowest_kept = min(c.step for c in as_last)
        assert all(c.step < lowest_kept for c in stepped if c not in as_last)


@settings(max_examples=300, deadline=None)
@given(runs(), rule_sets)
def test_every_mth_step_and_the_importance_rules(checkpoints, rules):
    plan = apply_rules(checkpoints, rules)
    for c in checkpoints:
        if rules.keep_every and c.step is not None and c.step % rules.keep_every == 0 and c.importance != "transient":
            assert c.id in plan.kept_ids
        if rules.keep_critical and c.importance == "critical":
            assert c.id in plan.kept_ids
        if rules.keep_milestones and c.importance == "milestone":
            assert c.id in plan.kept_ids


@settings(max_examples=300, deadline=None)
@given(runs(), rule_sets)
def test_transient_checkpoints_are_kept_by_promises_alone_and_offered_first(checkpoints, rules):
    plan = apply_rules(checkpoints, rules)
    for d in plan.kept:
        if d.checkpoint.importance == "transient":
            assert all(r.is_promise for r in d.reasons), d.reasons
    offered = [d.checkpoint.importance == "transient" for d in plan.dropped]
    assert offered == sorted(offered, reverse=True)  # every transient one before any other
    assert [d.checkpoint.id for d in plan.in_offer_order][: len(plan.dropped)] == [
        d.checkpoint.id for d in plan.dropped
    ]


@settings(max_examples=200, deadline=None)
@given(runs(), rule_sets, st.randoms(use_true_random=False))
def test_it_is_deterministic_whatever_the_input_order(checkpoints, rules, rnd: random.Random):
    shuffled = list(checkpoints)
    rnd.shuffle(shuffled)
    assert apply_rules(checkpoints, rules) == apply_rules(shuffled, rules)


@settings(max_examples=200, deadline=None)
@given(runs(), rule_sets)
def test_more_rules_never_keep_less(checkpoints, rules):
    wider = KeepRules(
        keep_last=rules.keep_last + 1,
        keep_every=rules.keep_every,
        keep_milestones=True,
        keep_critical=True,
        keep_stepless=True,
    )
    assert apply_rules(checkpoints, rules).kept_ids <= apply_rules(checkpoints, wider).kept_ids


# --- plain examples, to read as documentation ---------------------------------------------------


def ckpt(pk: int, step: int | None, importance: str = "routine", **kw) -> CheckpointFacts:
    return CheckpointFacts(id=pk, step=step, tag="" if step is not None else f"tag{pk}", importance=importance, **kw)


def test_it_keeps_the_last_two_and_every_thousandth_step():
    run = [ckpt(1, 500), ckpt(2, 1000), ckpt(3, 1500), ckpt(4, 2000), ckpt(5, 2500), ckpt(6, 3000)]
    plan = apply_rules(run, KeepRules(keep_last=2, keep_every=1000))
    assert plan.kept_ids == {6, 5, 4, 2}
    assert [d.checkpoint.step for d in plan.decisions] == [3000, 2500, 2000, 1500, 1000, 500]
    by_step = {d.checkpoint.step: d for d in plan.decisions}
    assert by_step[3000].reasons == (Reason.LAST_N, Reason.EVERY_MTH)
    assert (
        by_step[1500].why_dropped == "older than the last 2; step 1,500 is not a multiple of 1,000; routine importance"
    )


def test_a_held_checkpoint_is_kept_even_with_no_rules_at_all():
    rules = KeepRules(keep_milestones=False, keep_critical=False, keep_stepless=False)
    plan = apply_rules([ckpt(1, 10, held=True), ckpt(2, 20), ckpt(3, 30, newest_restorable=True)], rules)
    assert plan.kept_ids == {1, 3}
    assert plan.dropped_ids == {2}


def test_a_critical_checkpoint_is_dropped_only_when_critical_ones_are_not_kept():
    run = [ckpt(1, 10, "critical"), ckpt(2, 20)]
    assert 1 in apply_rules(run, KeepRules(keep_critical=True)).kept_ids
    dropped = apply_rules(run, KeepRules(keep_critical=False))
    assert 1 in dropped.dropped_ids
    assert "critical checkpoints are not kept" in dropped.dropped[-1].why_dropped


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_it_refuses_a_negative_or_fractional_count(bad):
    with pytest.raises(ValueError, match="whole number"):
        KeepRules(keep_last=bad)


@settings(max_examples=300, deadline=None)
@given(checkpoints=runs(), before=rule_sets, after=rule_sets)
def test_rules_that_loosen_nothing_keep_everything_the_old_rules_kept(checkpoints, before, after):
    """The retention lock's "only stricter" (``loosenings``) is sound: whatever the run, what the old rules kept,
    the new ones keep too. (It is also what a second person is not asked about: ``retention.services.deletes_more``.)"""
    if loosenings(before, after):
        return
    assert apply_rules(checkpoints, after).kept_ids >= apply_rules(checkpoints, before).kept_ids


@pytest.mark.parametrize(
    "before, after",
    [
        (KeepRules(keep_last=5), KeepRules(keep_last=4)),
        (KeepRules(keep_every=1000), KeepRules(keep_every=0)),
        (KeepRules(keep_every=1000), KeepRules(keep_every=2000)),
        (KeepRules(keep_every=1000), KeepRules(keep_every=300)),
        (KeepRules(keep_milestones=True), KeepRules(keep_milestones=False)),
        (KeepRules(keep_critical=True), KeepRules(keep_critical=False)),
        (KeepRules(keep_stepless=True), KeepRules(keep_stepless=False)),
    ],
)
def test_each_loosening_named_drops_a_checkpoint_the_old_rules_kept(before, after):
    """And it is not stricter than needed: for each loosening it names, some run loses a checkpoint."""
    assert loosenings(before, after)
    importance = {1: Importance.MILESTONE, 2: Importance.CRITICAL}
    run = [CheckpointFacts(id=i, step=s, importance=importance.get(i, Importance.ROUTINE)) for i, s in enumerate(
        (1000, 3001, 3003, 5000, 6000, 7000, 8000), start=1
    )] + [CheckpointFacts(id=99, step=None, tag="final")]  # fmt: skip
    assert apply_rules(run, before).kept_ids - apply_rules(run, after).kept_ids
