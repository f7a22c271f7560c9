"""Writes of the catalog: turning a location's shard files into runs, checkpoints and judged copies."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from audit.actor import Actor
from audit.services import audit
from catalog import hooks
from catalog.ages import better
from catalog.choices import Importance, SavedSource
from catalog.formats.base import FileEntry, Found
from catalog.layout import PathTemplate, group_files, subtree
from catalog.lifecycle import runs_reactivate, sidecar_statuses_apply
from catalog.lineage import sidecar_parents_apply
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
from catalog.recognition import recognize
from catalog.recovery_point import sidecar_gpus_apply
from catalog.verification import FileFacts, carried_over, checkpoints_verify, relative_checksums
from fleet.choices import LocationKind
from fleet.models import Inventory, StorageLocation

UNASSIGNED_TEAM = "unassigned"
# How a copy's reasons begin when the ingest kept it on a protected checkpoint its files no longer name.
OWNER_CONFLICT = "Ownership conflict"
# Verification runs after this many files have been judged (and at the end), so memory stays bounded.
VERIFY_EVERY_FILES = 20_000


def _affected_groups(location: StorageLocation, template: PathTemplate, inventory: Inventory | None) -> list[str]:
    files = ShardFile.objects.filter(location=location)
    if inventory is not None:
        files = files.filter(changed_by=inventory)
    groups: set[str] = set()
    for path in files.values_list("path", flat=True).iterator(chunk_size=5000):
        groups.add(template.group_of(path))
    return sorted(groups)


def _team_and_run_names(location: StorageLocation, template: PathTemplate, found: Found) -> tuple[str, str]:
    """The names of the team and run a found copy belongs to: its sidecar's, else its path's, else defaults."""
    matched = template.match(found.path) or {}
    team_name = (
        found.team
        or matched.get("team")
        or (location.default_team.name if location.default_team is not None else UNASSIGNED_TEAM)
    )
    run_name = found.run or matched.get("run")
    if not run_name:
        parent = found.path.rsplit("/", 1)[0] if "/" in found.path else ""
        run_name = parent.rsplit("/", 1)[-1] if parent else location.name
    return team_name, run_name


def _update_copy_links(targets: dict[int | None, list[int]]) -> None:
    for copy_id, ids in targets.items():
        for i in range(0, len(ids), 1000):
            ShardFile.objects.filter(pk__in=ids[i : i + 1000]).update(copy_id=copy_id)


@dataclass(slots=True)
class GroupFile:
    """One present file of a run directory, as recognition sees it, and the copy it is linked to now."""

    entry: FileEntry
    stored: bool  # a catalog_shardfile row exists for it (False: the ingest is about to insert it)
    copy_id: int | None = None


CheckpointKey = tuple[int, int | None, str]  # (run id, step, tag): the tag only tells step-less ones apart


class Judge:
    """Judges a location's run directories one at a time and writes their copies, in bulk per directory.

    ``group`` recognises one run directory and returns the copy each of its files belongs to; the
    caller writes those links (into new rows or onto existing ones) and then calls ``verify``, which
    verifies every checkpoint judged since the last call. Member files of the copies judged here are
    handed to verification from memory, so they are not read back. Memory is bounded by what the
    caller holds between two ``verify`` calls.
    """

    def __init__(self, location: StorageLocation, *, now: datetime | None = None) -> None:
        self.location = location
        self.template = PathTemplate.parse(location.path_template)
        self.now = now or timezone.now()
        self.teams: dict[str, Team] = {}
        self.runs: dict[tuple[int, str], Run] = {}
        self.found = 0  # copies present in the directories judged
        # A location with no copy yet (its first inventory) needs no lookup of existing ones per directory.
        self.has_copies = CheckpointCopy.objects.filter(location=location).exists()
        self.pending_files = 0
        self._judged: dict[int, tuple[str, list[str]]] = {}  # the formats' verdict on each copy
        self._touched: set[int] = set()  # checkpoints whose copies were judged, to verify
        self._known: dict[int, dict[str, tuple[str, FileFacts]]] = {}  # member files of copies judged here
        self._new_checkpoint_runs: set[int] = set()  # runs a checkpoint was created for since the last groups()
        self._owner: dict[int, int] = {}  # copy id -> its checkpoint id, for the copies judged here
        self._protected: dict[int, str] = {}  # checkpoint id -> why it is protected ('' when it is not)

    def _existing(self, group: str) -> dict[str, CheckpointCopy]:
        if not self.has_copies:
            return {}
        copies = CheckpointCopy.objects.filter(location=self.location)
        if group:
            copies = copies.filter(Q(path=group) | subtree(group))
        existing = {c.path: c for c in copies}
        if group and len(group.split("/")) < self.template.depth:
            existing = {p: c for p, c in existing.items() if self.template.group_of(p) == group}
        return existing

    def _checkpoints(self, found: list[Found]) -> list[Checkpoint]:
        """The checkpoint of each found copy, created where missing: a few queries per call, not per copy."""
        runs = self._runs(found)
        keys: list[CheckpointKey] = []
        for f, run in zip(found, runs, strict=True):
            if f.step is not None:
                keys.append((run.pk, f.step, ""))
            else:
                keys.append((run.pk, None, f.path.rsplit("/", 1)[-1] or self.location.name))
        wanted = set(keys)
        known = self._load_checkpoints(wanted)
        missing = [k for k in dict.fromkeys(keys) if k not in known]
        self._new_checkpoint_runs.update(run_id for run_id, _, _ in missing)
        if missing:
            fresh = [Checkpoint(run_id=run_id, step=step, tag=tag) for run_id, step, tag in missing]
            try:
                with transaction.atomic():
                    Checkpoint.objects.bulk_create(fresh, batch_size=1000)
            except IntegrityError:
                fresh = []
            if fresh and all(c.pk is not None for c in fresh):
                known.update(zip(missing, fresh, strict=True))
            else:
                # Another location's ingest created some of them meanwhile: skip conflicts, read back.
                Checkpoint.objects.bulk_create(
                    [Checkpoint(run_id=run_id, step=step, tag=tag) for run_id, step, tag in missing],
                    ignore_conflicts=True,
                    batch_size=1000,
                )
                known.update(self._load_checkpoints(set(missing)))
        return [known[k] for k in keys]

    def _runs(self, found: list[Found]) -> list[Run]:
        """The run of each found copy, its team and it created where missing (in bulk: one query per team)."""
        names = [_team_and_run_names(self.location, self.template, f) for f in found]
        wanted: dict[str, set[str]] = {}
        for team_name, run_name in names:
            team = self.teams.get(team_name)
            if team is None or (team.pk, run_name) not in self.runs:
                wanted.setdefault(team_name, set()).add(run_name)
        for team_name, run_names in sorted(wanted.items()):
            team = self.teams.get(team_name)
            if team is None:
                team, _ = Team.objects.get_or_create(name=team_name)
                self.teams[team_name] = team
            missing = {n for n in run_names if (team.pk, n) not in self.runs}
            for run in Run.objects.filter(team=team, name__in=sorted(missing)):
                self.runs[(team.pk, run.name)] = run
                missing.discard(run.name)
            if missing:
                # Another ingest may create the same run meanwhile: skip conflicts, read back.
                Run.objects.bulk_create([Run(team=team, name=n) for n in sorted(missing)], ignore_conflicts=True)
                for run in Run.objects.filter(team=team, name__in=sorted(missing)):
                    self.runs[(team.pk, run.name)] = run
        return [self.runs[(self.teams[team_name].pk, run_name)] for team_name, run_name in names]

    @staticmethod
    def _load_checkpoints(keys: set[CheckpointKey]) -> dict[CheckpointKey, Checkpoint]:
        """The stored checkpoints among ``keys``: two plain ``IN`` queries (a superset, filtered here)."""
        runs = sorted({run_id for run_id, _, _ in keys})
        steps = sorted({step for _, step, _ in keys if step is not None})
        tags = sorted({tag for _, step, tag in keys if step is None})
        queries = []
        for i in range(0, len(runs), 1000):
            if steps:
                queries.append(Checkpoint.objects.filter(run_id__in=runs[i : i + 1000], step__in=steps))
            if tags:
                queries.append(
                    Checkpoint.objects.filter(run_id__in=runs[i : i + 1000], step__isnull=True, tag__in=tags)
                )
        out: dict[CheckpointKey, Checkpoint] = {}
        for query in queries:
            for c in query:
                key = (c.run_id, c.step, "") if c.step is not None else (c.run_id, None, c.tag)
                if key in keys:
                    out[key] = c
        return out

    def group(self, group: str, entries: list[FileEntry], found: list[Found] | None = None) -> dict[str, int | None]:
        """Recognise the present files of one run directory and write its copies; returns {path: copy id}
        for the files a copy claims. Copies of the location in this directory no longer found are marked gone.
        ``found`` is ``recognize(entries)`` when the caller has already recognised them (it is pure).
        """
        return self.groups([(group, entries, found)])[0]

    def groups(self, items: list[tuple[str, list[FileEntry], list[Found] | None]]) -> list[dict[str, int | None]]:
        """``group`` for several run directories at once (each ``(group, entries, found or None)``), with
        the same result: their runs, checkpoints and new copies are written in a few statements for all
        of them, not per directory. Returns the ``{path: copy id}`` of each, in the order given."""

        now = self.now
        prepared: list[tuple[str, list[FileEntry], list[Found]]] = []
        every: list[Found] = []
        for group, entries, found in items:
            if found is None:
                found = recognize(entries)
            prepared.append((group, entries, found))
            every.extend(found)
        checkpoints = iter(self._checkpoints(every) if every else [])
        pending: list[tuple[dict[str, CheckpointCopy], list, list, set[str]]] = []
        created_all: list[CheckpointCopy] = []
        reappeared: list[CheckpointCopy] = []
        statuses: list[tuple[int, Found]] = []  # (run id, a copy whose sidecar says the run's status)
        saved: dict[int, Checkpoint] = {}  # checkpoints whose saved time this call moved (``catalog.ages``)
        for group, entries, found in prepared:
            by_path = {e.path: e for e in entries}
            existing = self._existing(group)
            created: list[tuple[CheckpointCopy, Found, list[FileEntry]]] = []
            kept: list[tuple[CheckpointCopy, Found, list[FileEntry]]] = []
            seen_paths: set[str] = set()
            for f in found:
                checkpoint = next(checkpoints)
                if f.status is not None or f.gpus is not None or f.parent is not None:
                    statuses.append((checkpoint.run_id, f))
                if f.importance in Importance.values and checkpoint.importance != f.importance:
                    checkpoint.importance = f.importance
                    checkpoint.save(update_fields=["importance"])
                members = [m for p in f.files if (m := by_path.get(p)) is not None]
                newest = max([m.mtime for m in members], default=None)
                self._offer_saved(checkpoint, f, newest, saved)
                values: dict[str, Any] = {
                    "checkpoint_id": checkpoint.pk,
                    "format": f.format,
                    "state": f.state,
                    "reasons": list(f.reasons),
                    "temporary": f.temporary,
                    "file_count": len(members),
                    "bytes": sum([m.size for m in members]),
                    "expected_files": f.expected_files,
                    "expected_bytes": f.expected_bytes,
                    "newest_mtime": datetime.fromtimestamp(newest, UTC) if newest is not None else None,
                    "reference_checksums": relative_checksums(f.path, f.reference_checksums),
                    "gone_at": None,
                }
                copy = existing.get(f.path)
                if copy is not None and copy.checkpoint_id != checkpoint.pk:
                    kept_on = self._refuse_move(copy, checkpoint, f)
                    if kept_on is not None:
                        values["checkpoint_id"] = copy.checkpoint_id
                        values["reasons"].append(kept_on)
                if copy is None:
                    copy = CheckpointCopy(location=self.location, path=f.path, judged_at=now, **values)
                    created.append((copy, f, members))
                    created_all.append(copy)
                else:
                    if copy.gone_at is not None:
                        reappeared.append(copy)  # written again: by the product, perhaps, from another copy
                    self._touched.add(copy.checkpoint_id)  # the one it belonged to, should the copy move to another
                    values["state"], values["reasons"] = carried_over(copy, f.state, values["reasons"])
                    changed = [k for k, v in values.items() if getattr(copy, k) != v]
                    if changed:
                        for k in changed:
                            setattr(copy, k, values[k])
                        copy.judged_at = now
                        copy.save(update_fields=[*changed, "judged_at"])
                    kept.append((copy, f, members))
                seen_paths.add(f.path)
            pending.append((existing, kept, created, seen_paths))
            self.pending_files += len(entries)
        self._provenance(created_all, reappeared)
        if created_all:
            CheckpointCopy.objects.bulk_create(created_all, batch_size=500)
        if saved:
            Checkpoint.objects.bulk_update(list(saved.values()), ["saved_at", "saved_source"], batch_size=500)
        self._lifecycle(statuses)
        out: list[dict[str, int | None]] = []
        for existing, kept, created, seen_paths in pending:
            targets: dict[str, int | None] = {}
            for copy, f, members in (*kept, *created):
                conflict = [r for r in copy.reasons or [] if r.startswith(OWNER_CONFLICT)]
                self._judged[copy.pk] = (f.state, [*f.reasons, *conflict])
                self._touched.add(copy.checkpoint_id)
                self._owner[copy.pk] = copy.checkpoint_id
                known = self._known.setdefault(copy.pk, {})
                pk = copy.pk
                for m in members:  # the files of f.files that are present, in that order
                    targets[m.path] = pk
                    known[m.path] = (
                        m.path,
                        FileFacts(
                            m.size, m.checksum_algo or "", m.checksum or "", m.digests, m.mtime, m.facts, m.first
                        ),
                    )
                self.found += 1
            vanished = [c for p, c in existing.items() if p not in seen_paths and c.gone_at is None]
            if vanished:
                CheckpointCopy.objects.filter(pk__in=[c.pk for c in vanished]).update(
                    gone_at=now, file_count=0, bytes=0
                )
                self._touched.update(c.checkpoint_id for c in vanished)
            out.append(targets)
        return out

    def _offer_saved(self, checkpoint: Checkpoint, f: Found, newest: float | None, saved: dict) -> None:
        """Keep the checkpoint's saved time (``catalog.ages``): its sidecar's ``saved_at``, else the newest file
        of this copy (mtime on hosts, LastModified in buckets) when earlier than what was known. In memory, so an
        unchanged push writes nothing; the changed ones are written together (``saved``)."""
        offers: list[tuple[datetime | None, str]] = []
        if f.saved_at is not None:
            offers.append((datetime.fromtimestamp(f.saved_at, UTC), SavedSource.SIDECAR))
        if newest is not None and newest > 0:  # 0: a file whose time was never set (a tool's placeholder)
            source = SavedSource.LAST_MODIFIED if self.location.kind == LocationKind.BUCKET else SavedSource.MTIME
            offers.append((datetime.fromtimestamp(newest, UTC), source))
        for offer in offers:
            if better((checkpoint.saved_at, checkpoint.saved_source), offer):
                checkpoint.saved_at, checkpoint.saved_source = offer
                saved[checkpoint.pk] = checkpoint

    def _provenance(self, created: list[CheckpointCopy], reappeared: list[CheckpointCopy]) -> None:
        """Record where the product wrote the copies that appeared (``hooks.provenance``): set on new rows before they
        are inserted, written onto rows that reappear, so that their first verification already knows it."""
        if not created and not reappeared:
            return
        made = hooks.provenance(self.location, [c.path for c in (*created, *reappeared)])
        if not made:
            return
        for copy in created:
            if (m := made.get(copy.path)) is not None:
                copy.made_from_id, copy.made_at, copy.made_by = m.source_id, m.at, m.by[:60]
        for copy in reappeared:
            m = made.get(copy.path)
            if m is not None and (copy.made_from_id, copy.made_at) != (m.source_id, m.at):
                copy.made_from_id, copy.made_at, copy.made_by = m.source_id, m.at, m.by[:60]
                copy.save(update_fields=["made_from", "made_at", "made_by"])

    def _protection(self, checkpoint_ids) -> dict[int, str]:
        """{checkpoint id: why it is protected} among ``checkpoint_ids``, asked once per Judge for each."""
        wanted = [pk for pk in set(checkpoint_ids) if pk not in self._protected]
        if wanted:
            found = hooks.protections(wanted)
            self._protected.update({pk: found.get(pk, "") for pk in wanted})
        return {pk: self._protected[pk] for pk in checkpoint_ids if self._protected.get(pk)}

    def _refuse_move(self, copy: CheckpointCopy, claimed: Checkpoint, found: Found) -> str | None:
        """The conflict reason when ``copy`` may not move from its checkpoint to ``claimed``, else None.

        Protection sits on checkpoint rows (holds, pins, leases, scheduled deletions), so a copy that moved to
        another checkpoint would leave it covering nothing: a rewritten sidecar naming another run would walk
        the files out of a compliance hold (issue 26). Failing closed, the copy stays where it is and says
        why, on its checkpoint page and in the problems list, until a person settles it (releases the
        protection, or fixes what the files say); the move is audited once, when it is first refused. The
        database refuses the same UPDATE for holds and pins (``actions.ownership``).
        """
        why = self._protection([copy.checkpoint_id]).get(copy.checkpoint_id)
        if not why:
            return None
        team_name, run_name = _team_and_run_names(self.location, self.template, found)
        said = f"{team_name}/{run_name}" + (f" step {found.step}" if found.step is not None else f" {found.path}")
        reason = (
            f"{OWNER_CONFLICT}: the files now say this copy belongs to {said} (checkpoint {claimed.pk}), but it "
            f"stays on checkpoint {copy.checkpoint_id}, which is protected ({why}); settle it by hand"
        )
        if reason not in (copy.reasons or []):
            audit(
                self._actor(),
                "copy.move_refused",
                target_type="copy",
                target_id=copy.pk,
                target_label=f"{self.location.name}:{copy.path}",
                reason=reason,
                before={"checkpoint": copy.checkpoint_id},
                after={"claimed_checkpoint": claimed.pk, "claimed": said, "protected_by": why},
            )
        return reason

    def keep_protected(self, files: list[GroupFile], targets: dict[str, int | None]) -> dict[str, int | None]:
        """``targets`` less the moves of stored files away from a copy of a protected checkpoint: such a file
        stays linked to its copy (a file that left a held checkpoint for another one, or for none, could be
        deleted with that one, or as an orphan). Call it with what ``group`` returned, before writing links.
        """
        moving = [
            (f.entry.path, f.copy_id, targets.get(f.entry.path))
            for f in files
            if f.stored and f.copy_id is not None and targets.get(f.entry.path) != f.copy_id
        ]
        if not moving:
            return targets
        owners = dict(self._owner)
        unknown = {old for _, old, _ in moving if old not in owners}
        unknown |= {new for _, _, new in moving if new is not None and new not in owners}
        if unknown:
            owners.update(CheckpointCopy.objects.filter(pk__in=unknown).values_list("pk", "checkpoint_id"))
        protected = self._protection([owners[old] for _, old, _ in moving if old in owners])
        if not protected:
            return targets
        out = dict(targets)
        for path, old, new in moving:
            owner = owners.get(old)
            if owner in protected and (new is None or owners.get(new) != owner):
                out[path] = old
        return out

    def _actor(self) -> Actor:
        """Who speaks when the ingest sets a run's status: the host's agent, or the scan of a bucket."""
        host = self.location.host if self.location.host_id else None
        return Actor.agent(host.name) if host is not None else Actor.system(f"scan of {self.location.name}")

    def _lifecycle(self, statuses: list[tuple[int, Found]]) -> None:
        """Runs' statuses from what this batch found: what the newest sidecar of each run says (``status``),
        and an inferred end taken back for runs that have a new checkpoint (``catalog.lifecycle``)."""
        said: dict[int, tuple[tuple[int, float], str, str, float | None]] = {}
        facts: dict[str, dict[int, tuple[int, Any]]] = {"gpus": {}, "parent": {}}
        for run_id, f in statuses:
            rank = (f.step if f.step is not None else -1, f.status_at or 0.0)
            if f.status is not None and (run_id not in said or rank > said[run_id][0]):
                said[run_id] = (rank, f.status or "", f.status_reason, f.status_at)
            for name in ("gpus", "parent"):  # the newest sidecar that says it (catalog.recovery_point, lineage)
                value = getattr(f, name)
                if value is not None and (run_id not in facts[name] or rank[0] > facts[name][run_id][0]):
                    facts[name][run_id] = (rank[0], value)
        new_runs, self._new_checkpoint_runs = self._new_checkpoint_runs, set()
        if not said and not new_runs and not facts["gpus"] and not facts["parent"]:
            return
        actor = self._actor()
        if facts["gpus"]:
            sidecar_gpus_apply({k: v for k, (_, v) in facts["gpus"].items()}, actor=actor)
        if facts["parent"]:
            sidecar_parents_apply({k: v for k, (_, v) in facts["parent"].items()}, actor=actor)
        if said:
            sidecar_statuses_apply(
                {
                    run_id: (status, reason, datetime.fromtimestamp(at, UTC) if at else None)
                    for run_id, (_, status, reason, at) in said.items()
                },
                actor=actor,
            )
        runs_reactivate(new_runs - set(said), actor=actor)

    def verify(self) -> int:
        """Verify the checkpoints judged since the last call (their links must be written by now)."""
        written = 0
        if self._touched:
            written = checkpoints_verify(self._touched, judged=self._judged, known=self._known)
        self._judged, self._touched, self._known = {}, set(), {}
        self.pending_files = 0
        return written


def location_recognize(*, location: StorageLocation, inventory: Inventory | None = None) -> int:
    """Re-judge the checkpoints in every run directory the inventory touched; all of them without one.

    Returns how many checkpoint copies are present in the groups looked at. Runs inside the caller's
    transaction over the stored shard files, one run directory at a time, relinking only the files
    whose copy changed; verification runs every few thousand files, so memory stays bounded.
    (An ingest judges the staged rows instead, before it writes them: ``ingest.inventory``.)
    """
    judge = Judge(location)
    template = judge.template
    for group in _affected_groups(location, template, inventory):
        files: list[GroupFile] = []
        ids: dict[str, int] = {}
        for pk, copy_id, entry in group_files(location, template, group):
            files.append(GroupFile(entry, True, copy_id))
            ids[entry.path] = pk
        targets = judge.keep_protected(files, judge.group(group, [f.entry for f in files]))
        moves: dict[int | None, list[int]] = {}
        for f in files:
            target = targets.get(f.entry.path)
            if f.copy_id != target:
                moves.setdefault(target, []).append(ids[f.entry.path])
        _update_copy_links(moves)
        if judge.pending_files >= VERIFY_EVERY_FILES:
            judge.verify()
    judge.verify()
    return judge.found
