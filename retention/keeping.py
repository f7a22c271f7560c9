"""What a locked retention policy keeps, asked by the deletion paths below (``actions.keepers``, issue 27 item 9).

The same engine as the simulator and the policies (``retention.rules.apply_rules``) over the same checkpoints (those
with a present copy, ``retention.selectors.load_facts``): a checkpoint is kept by a locked policy when one of its
rules keeps it. The promises (held, pinned, the newest restorable, disputed, not identified) are left out here:
they refuse or guard a deletion on their own (``actions.promises``), whoever's policy it is.
"""

from __future__ import annotations

from collections import defaultdict

from django.urls import reverse

from actions.keepers import Keeper
from catalog.models import Checkpoint, Run
from retention.models import RetentionPolicy
from retention.rules import CheckpointFacts, Reason, apply_rules
from retention.selectors import locked_name, locked_policy_rows


def _why(reason: Reason, policy: RetentionPolicy) -> str:
    if reason == Reason.LAST_N:
        return f"among the last {policy.keep_last:,}"
    if reason == Reason.EVERY_MTH:
        return f"its step is a multiple of {policy.keep_every:,}"
    return reason.label


def keepers_of(checkpoint_ids: list[int]) -> dict[int, list[Keeper]]:
    """{checkpoint id: the locked policies whose rules keep it}, for those of ``checkpoint_ids`` one keeps. Four
    queries whatever the number of checkpoints: their runs, the locked policies, the runs' checkpoints."""
    asked = set(checkpoint_ids)
    run_of = dict(Checkpoint.objects.filter(pk__in=asked).values_list("pk", "run_id"))
    runs = list(Run.objects.filter(pk__in=set(run_of.values())).only("pk", "team_id"))
    locks = {run_id: policies for run_id, policies in locked_policy_rows(runs).items() if policies}
    if not locks:
        return {}
    facts: dict[int, list[CheckpointFacts]] = defaultdict(list)
    rows = (
        Checkpoint.objects.filter(run_id__in=list(locks), copies__gone_at__isnull=True)
        .values_list("pk", "run_id", "step", "tag", "importance")
        .distinct()
        .order_by("pk")
    )
    for pk, run_id, step, tag, importance in rows:
        facts[run_id].append(CheckpointFacts(id=pk, step=step, tag=tag, importance=importance))
    out: dict[int, list[Keeper]] = {}
    for run_id, policies in locks.items():
        for policy in policies:
            for decision in apply_rules(facts[run_id], policy.rules).kept:
                pk = decision.checkpoint.id
                rules = [r for r in decision.reasons if not r.is_promise]
                if pk not in asked or not rules:
                    continue
                out.setdefault(pk, []).append(
                    Keeper(
                        policy_id=policy.pk,
                        name=locked_name(policy),
                        url=reverse("retention:policy", args=[policy.pk]),
                        why=", ".join(_why(r, policy) for r in rules),
                    )
                )
    return out
