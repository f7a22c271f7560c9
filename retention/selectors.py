"""The retention simulator: the keep rules applied to the real inventory, with the bytes and money they free.

Nothing here writes. Bytes come from ``CopyTierUsage`` (what each present copy holds on each tier
and storage class now), never from shard files; money from the price book in force today, as a
month at today's prices (GiB x price per GiB-month). The number of queries is fixed, whatever the
number of runs and checkpoints: the runs, their checkpoints, their copies' usage, the newest
restorable checkpoints, the disputed ones, holds and pins, open deletions, the price book and the locations.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

from django.db.models import Q, QuerySet
from django.db.models.functions import Coalesce

from actions.models import DeletionJob
from actions.promises import unidentified_ids
from actions.protection import OPEN_DELETION_STATES, protected_ids
from catalog.models import Checkpoint, CopyTierUsage, Run
from catalog.recovery import disputed_checkpoints, newest_restorable_ids
from catalog.selectors import with_kept_copy
from fleet.choices import LocationKind
from fleet.early_deletion import EarlyDeletion, days_stored, min_storage_days
from fleet.models import StorageLocation
from fleet.pricebook import GIB, PriceBook, book_currency, utc_today
from retention.models import RetentionPolicy
from retention.rules import CheckpointFacts, CopyFacts, Decision, KeepRules, Plan, apply_rules


@dataclass(frozen=True)
class Scope:
    """What a simulation covers: one run, one team's runs, or the whole fleet (both empty)."""

    team_id: int | None = None
    run_id: int | None = None
    # The teams a scoped person sees (``access.scoping.visible_team_names``); None: every team.
    team_names: tuple[str, ...] | None = None

    def runs(self) -> QuerySet[Run]:
        runs = Run.objects.all()
        if self.run_id is not None:
            runs = runs.filter(pk=self.run_id)
        if self.team_id is not None:
            runs = runs.filter(team_id=self.team_id)
        if self.team_names is not None:
            runs = runs.filter(team__name__in=self.team_names)
        return runs

    @property
    def params(self) -> str:
        if self.run_id is not None:
            return f"run={self.run_id}"
        if self.team_id is not None:
            return f"team={self.team_id}"
        return ""


class Pricer:
    """Monthly cost of bytes on a tier and storage class at a location, at the prices in force on ``day``."""

    def __init__(self, *, day: date, book: PriceBook | None = None) -> None:
        self.day = day
        self.book = book or PriceBook.load(until=day)
        self.currency = book_currency() if book is None else book.currency
        self._locations: dict[int, StorageLocation] | None = None
        self._cache: dict[tuple, Decimal | None] = {}
        self._minimums: dict[str, int] | None = None

    def location(self, pk: int) -> StorageLocation | None:
        if self._locations is None:
            self._locations = {loc.pk: loc for loc in StorageLocation.objects.only("pk", "kind", "host_id", "tier")}
        return self._locations.get(pk)

    def price(self, location: StorageLocation | None, tier: str, storage_class: str) -> Decimal | None:
        if location is None:
            return None
        key = (location.pk, location.kind, location.host_id, tier, storage_class)
        if key not in self._cache:
            self._cache[key] = self.book.price(location, tier, storage_class, self.day)
        return self._cache[key]

    def add_early_deletion(self, into: EarlyDeletion, copy: CopyFacts) -> None:
        """Count ``copy``'s bytes into ``into`` if removing them now ends them before their class's minimum duration.

        As the tiering what-if counts them (``retention.tiering``): per copy and storage class, its days stored from
        the copy's newest file (so an upper bound), objects in buckets only; one file is one object.
        """
        location = self.location(copy.location_id)
        if location is None or location.kind != LocationKind.BUCKET:
            return
        if self._minimums is None:
            self._minimums = min_storage_days()
        into.add(
            nbytes=copy.bytes,
            objects=copy.files,
            price_per_gib_month=self.price(location, copy.tier, copy.storage_class),
            storage_class=copy.storage_class,
            days_stored=copy.days_stored,
            minimums=self._minimums,
        )

    def monthly(self, copy: CopyFacts) -> Decimal | None:
        """What ``copy``'s bytes cost a month; None when no price applies."""
        price = self.price(self.location(copy.location_id), copy.tier, copy.storage_class)
        return None if price is None else Decimal(copy.bytes) / GIB * price


@dataclass
class Money:
    """Bytes and what they cost a month; ``unpriced`` bytes have no price and are not in ``monthly``."""

    bytes: int = 0
    monthly: Decimal = field(default_factory=Decimal)
    unpriced: int = 0
    checkpoints: int = 0

    # Removing the bytes: what deleting objects younger than their class's minimum storage duration is billed.
    early_deletion: EarlyDeletion = field(default_factory=EarlyDeletion)

    def add_checkpoint(self, checkpoint: CheckpointFacts, pricer: Pricer, *, removing: bool = False) -> None:
        self.checkpoints += 1
        for copy in checkpoint.copies:
            self.bytes += copy.bytes
            cost = pricer.monthly(copy)
            if cost is None:
                self.unpriced += copy.bytes
            else:
                self.monthly += cost
            if removing:
                pricer.add_early_deletion(self.early_deletion, copy)

    def __iadd__(self, other: Money) -> Money:
        self.bytes += other.bytes
        self.monthly += other.monthly
        self.unpriced += other.unpriced
        self.checkpoints += other.checkpoints
        self.early_deletion += other.early_deletion
        return self


@dataclass
class RunResult:
    """One run under the rules: the plan, what stays, what goes, and the newest restorable checkpoint left."""

    run: Run
    plan: Plan
    kept: Money
    freed: Money
    scheduled: Money  # dropped, but an open deletion already covers them: not counted as freed again
    newest_restorable: Decision | None
    newest_verified: bool

    @property
    def to_propose(self) -> tuple[Decision, ...]:
        """Dropped checkpoints that no open deletion covers yet: what a policy would schedule."""
        return tuple(d for d in self.plan.dropped if not d.checkpoint.scheduled)


@dataclass
class Simulation:
    """The rules over a scope: each run's result and the totals."""

    rules: KeepRules
    scope: Scope
    day: date
    currency: str
    runs: list[RunResult]
    kept: Money = field(default_factory=Money)
    freed: Money = field(default_factory=Money)
    scheduled: Money = field(default_factory=Money)

    @property
    def runs_without_restorable(self) -> list[RunResult]:
        return [r for r in self.runs if r.newest_restorable is None and r.plan.decisions]

    @property
    def disputed(self) -> list[Decision]:
        """Checkpoints kept because a copy is disputed (promise 12): the rules alone would not keep them all."""
        return [d for r in self.runs for d in r.plan.decisions if d.checkpoint.disputed]


def load_facts(run_ids: list[int], *, day: date) -> tuple[dict[int, list[CheckpointFacts]], dict[int, tuple]]:
    """({run id: its checkpoints with a present copy, as the rules see them}, ``newest_restorable_ids``). The
    checkpoints are the run page's (``catalog.selectors.with_kept_copy``): an interrupted save's left-over is not one.

    A fixed number of queries whatever the number of runs.
    """
    if not run_ids:
        return {}, {}
    restorable = newest_restorable_ids(run_ids)
    newest = {ckpt for ckpt, _ in restorable.values()}
    disputed = set(Checkpoint.objects.filter(disputed_checkpoints(), run_id__in=run_ids).values_list("pk", flat=True))
    unidentified = unidentified_ids(run_ids)
    held, pinned = protected_ids(run_ids)
    scheduled = set(
        DeletionJob.objects.filter(state__in=OPEN_DELETION_STATES, checkpoint__run_id__in=run_ids).values_list(
            "checkpoint_id", flat=True
        )
    )
    copies: dict[int, list[CopyFacts]] = defaultdict(list)
    # Left-overs of interrupted saves are orphans, not checkpoints or copies: counted as the run page counts
    # (``catalog.selectors.KEPT``), so a rule such as "keep the last N" never keeps an interrupted save.
    usage = CopyTierUsage.objects.filter(
        copy__gone_at__isnull=True, copy__temporary=False, copy__checkpoint__run_id__in=run_ids
    ).values_list(
        "copy__checkpoint_id",
        "copy_id",
        "location_id",
        "tier",
        "storage_class",
        "bytes",
        "files",
        # How long the bytes have been stored: since the copy's newest file was written (a lower
        # bound, so an early-deletion charge worked out from it is never too small).
        Coalesce("copy__newest_mtime", "copy__first_seen_at"),
    )
    for ckpt_id, copy_id, loc_id, tier, storage_class, size, files, since in usage.order_by(
        "copy_id", "tier", "storage_class"
    ):
        copies[ckpt_id].append(CopyFacts(copy_id, loc_id, tier, storage_class, size, files, days_stored(since, day)))
    facts: dict[int, list[CheckpointFacts]] = defaultdict(list)
    checkpoints = (
        with_kept_copy(Checkpoint.objects.filter(run_id__in=run_ids))
        .values_list("pk", "run_id", "step", "tag", "importance")
        .order_by("pk")
    )
    for pk, run_id, step, tag, importance in checkpoints:
        facts[run_id].append(
            CheckpointFacts(
                id=pk,
                step=step,
                tag=tag,
                importance=importance,
                pinned=pk in pinned,
                held=pk in held,
                newest_restorable=pk in newest,
                disputed=pk in disputed,
                unidentified=pk in unidentified,
                scheduled=pk in scheduled,
                copies=tuple(copies.get(pk, ())),
            )
        )
    return facts, restorable


def locked_policy_rows(runs: list[Run]) -> dict[int, list[RetentionPolicy]]:
    """{run id: the locked retention policies that cover it}: its team's, then its own, in one query.

    Locked means locked, in its cooling-off or binding, enabled or not: a lock promises what stays, whichever
    policy (or the simulator) is applied to the run, until an approver unlocks it (``retention.services``). A
    deletion of what one keeps needs its quorum (``retention.keeping``).
    """
    if not runs:
        return {}
    run_ids = [r.pk for r in runs]
    team_ids = {r.team_id for r in runs}
    locked = RetentionPolicy.objects.filter(locked_at__isnull=False).filter(
        Q(team_id__in=team_ids) | Q(run_id__in=run_ids)
    )
    by_team: dict[int, list[RetentionPolicy]] = defaultdict(list)
    by_run: dict[int, list[RetentionPolicy]] = defaultdict(list)
    for policy in locked.order_by("pk"):
        if policy.run_id is not None:
            by_run[policy.run_id].append(policy)
        elif policy.team_id is not None:
            by_team[policy.team_id].append(policy)
    return {r.pk: [*by_team.get(r.team_id, []), *by_run.get(r.pk, [])] for r in runs}


def locked_name(policy: RetentionPolicy) -> str:
    return f"policy {policy.name!r} (#{policy.pk})"


def locked_policies(runs: list[Run]) -> dict[int, list[tuple[str, KeepRules]]]:
    """{run id: the locked retention policies that cover it, as (name, rules)} (``locked_policy_rows``)."""
    return {
        run_id: [(locked_name(p), p.rules) for p in policies] for run_id, policies in locked_policy_rows(runs).items()
    }


def simulate(
    *,
    rules: KeepRules,
    scope: Scope | None = None,
    day: date | None = None,
    exclude_run_ids: frozenset[int] = frozenset(),
    pricer: Pricer | None = None,
) -> Simulation:
    """Apply ``rules`` to every run of ``scope`` and price what they keep and free; changes nothing."""
    scope = scope or Scope()
    day = day or utc_today()
    pricer = pricer or Pricer(day=day)
    runs = [
        r
        for r in scope.runs().select_related("team").order_by("team__name", "name", "pk")
        if r.pk not in exclude_run_ids
    ]
    facts, restorable = load_facts([r.pk for r in runs], day=day)
    binding = locked_policies(runs)
    sim = Simulation(rules=rules, scope=scope, day=day, currency=pricer.currency, runs=[])
    for run in runs:
        plan = apply_rules(facts.get(run.pk, []), rules, binding.get(run.pk, ()))
        kept, freed, scheduled = Money(), Money(), Money()
        newest = None
        for d in plan.decisions:
            if d.kept:
                kept.add_checkpoint(d.checkpoint, pricer)
                if d.checkpoint.newest_restorable:
                    newest = d
            elif d.checkpoint.scheduled:
                scheduled.add_checkpoint(d.checkpoint, pricer)
            else:
                freed.add_checkpoint(d.checkpoint, pricer, removing=True)
        verified = restorable.get(run.pk, (None, False))[1]
        sim.runs.append(RunResult(run, plan, kept, freed, scheduled, newest, verified))
        sim.kept += kept
        sim.freed += freed
        sim.scheduled += scheduled
    return sim
