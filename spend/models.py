"""The spend rollups: per day and per month, what each location held for each run, tier and state, priced; and
each location's cursor. Derived rows, never edited. The tables keep the names they had in catalog (``db_table``):
the rows stayed where they were when the models moved here."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from catalog.models import Run, Team


class UsageState(models.TextChoices):
    """What the bytes of a usage row are, as far as spend cares: restorable, broken or orphaned."""

    COMPLETE = "complete", "Complete copies"
    PARTIAL = "partial", "Partial copies"
    CORRUPT = "corrupt", "Corrupt copies"
    TEMPORARY = "temporary", "Left-overs of interrupted saves"
    UNCLAIMED = "unclaimed", "Files of no checkpoint"
    MULTIPART = "multipart", "Incomplete multipart uploads"
    NONCURRENT = "noncurrent", "Non-current object versions"


class UsageDaily(models.Model):
    """Bytes, files and cost stored on one UTC day at one location by one run, tier, storage class and state.

    The rollup every spend page reads instead of shard files (``spend.usage``). A day's row holds
    the location's state at the last inventory applied that day; a day without an inventory holds
    the last known state, carried forward (``carried``). A day before a location's first inventory can be
    estimated from the files' modification times (``estimated``, ``spend.usage.usage_backfill``).
    ``cost_nanos`` is that day's cost in
    billionths of the price book's currency: bytes x the price in force that day / the days of its
    month, rounded once per row. An integer, so that sums are exact on every database (SQLite
    stores decimals as floats); read it through ``spend.usage.money``. Null: no price applies.

    Rows are never rewritten for a past day, except when a price point is added that takes effect
    on a day already rolled up (in the current month only): then those days are priced again.
    Team and run status are copied in when a row is written, so that the past keeps the owner and
    state it had; run and location are protected from deletion while they have history.
    """

    day = models.DateField()
    location = models.ForeignKey("fleet.StorageLocation", on_delete=models.PROTECT, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, null=True, blank=True, related_name="usage")
    run_status = models.CharField(max_length=12, blank=True, help_text="The run's status when the row was written.")
    tier = models.CharField(max_length=32)
    storage_class = models.CharField(max_length=32, blank=True)
    state = models.CharField(max_length=12, choices=UsageState.choices)
    bytes = models.BigIntegerField()
    files = models.BigIntegerField()
    cost_nanos = models.BigIntegerField(null=True, blank=True)
    carried = models.BooleanField(default=False, help_text="Copied from an earlier day: no inventory that day.")
    estimated = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Estimated from the modification times of files present later (usage_backfill), not measured.",
    )

    class Meta:
        db_table = "catalog_usagedaily"
        ordering = ["-day", "location", "run"]
        verbose_name = "daily usage"
        verbose_name_plural = "daily usage"
        constraints = [
            models.UniqueConstraint(
                fields=["day", "location", "run", "tier", "storage_class", "state"],
                condition=Q(run__isnull=False),
                name="usage_day_location_run_unique",
            ),
            models.UniqueConstraint(
                fields=["day", "location", "tier", "storage_class", "state"],
                condition=Q(run__isnull=True),
                name="usage_day_location_unassigned_unique",
            ),
            models.CheckConstraint(condition=Q(bytes__gte=0) & Q(files__gte=0), name="usage_counts_not_negative"),
        ]
        indexes = [
            models.Index(fields=["location", "day"], name="usage_location_day"),
            models.Index(fields=["run", "day"], name="usage_run_day"),
            # Leads with the day: the newest rolled-up day of a period (every spend page's first query, 15 ms
            # -> 0.1 ms at 10M files) and a day's rows; covering, so a month's spend by day and tier is read from
            # the index alone (81 -> 7 ms at 10M files).
            models.Index(fields=["day", "tier", "cost_nanos", "bytes"], name="usage_day_tier"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.location_id} run {self.run_id or '-'} {self.tier}: {self.bytes} B"


class UsageMonthly(models.Model):
    """The ``UsageDaily`` rows of one calendar month summed, per location, team, run, run status, tier,
    storage class and state: what the spend pages read for a month instead of its daily rows.

    Derived, never edited: whenever ``spend.usage`` writes daily rows (refresh, carry forward,
    reprice) it rewrites the months those rows fall in from the daily rows, in the same transaction,
    so a month's row is always exactly the sum of its days (the current month up to its newest day).
    ``byte_days`` is the sum of the days' bytes (GiB-months = byte_days / 2**30 / days of the month);
    ``cost_nanos`` the sum of the days' costs, null when no day of the group was priced; ``estimated_days``
    how many of the days were estimated from file times (``UsageDaily.estimated``), so a month's page can say so.
    """

    month = models.DateField(help_text="The first day of the month.")
    location = models.ForeignKey("fleet.StorageLocation", on_delete=models.PROTECT, related_name="+")
    team = models.ForeignKey(Team, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    run_status = models.CharField(max_length=12, blank=True)
    tier = models.CharField(max_length=32)
    storage_class = models.CharField(max_length=32, blank=True)
    state = models.CharField(max_length=12, choices=UsageState.choices)
    days = models.IntegerField(help_text="Daily rows summed.")
    byte_days = models.BigIntegerField()
    file_days = models.BigIntegerField()
    cost_nanos = models.BigIntegerField(null=True, blank=True)
    estimated_days = models.IntegerField(
        default=0, db_default=0, help_text="Of the days summed, how many were estimated from file times (not measured)."
    )

    class Meta:
        db_table = "catalog_usagemonthly"
        ordering = ["-month", "location", "run"]
        verbose_name = "monthly usage"
        verbose_name_plural = "monthly usage"
        constraints = [
            models.UniqueConstraint(
                fields=["month", "location", "run", "team", "run_status", "tier", "storage_class", "state"],
                name="usagemonthly_group_unique",
            ),
            models.CheckConstraint(
                condition=Q(days__gt=0) & Q(byte_days__gte=0) & Q(file_days__gte=0), name="usagemonthly_not_negative"
            ),
        ]
        indexes = [
            models.Index(fields=["location", "month"], name="usagemonthly_location_month"),
            models.Index(fields=["run", "month"], name="usagemonthly_run_month"),
        ]

    def __str__(self) -> str:
        return f"{self.month:%Y-%m} {self.location_id} run {self.run_id or '-'} {self.tier}: {self.byte_days} B-days"


class UsageCursor(models.Model):
    """How far one location's daily usage rows reach, and the last day an inventory refreshed them.

    ``day`` moves forward when an inventory is applied (that day is refreshed) or when beat carries
    the last state forward to today; ``refreshed_day`` only with an inventory. Days in between were
    carried. An empty location has a cursor and no rows, so nothing older is carried over it.
    """

    location = models.OneToOneField(
        "fleet.StorageLocation", on_delete=models.CASCADE, primary_key=True, related_name="usage_cursor"
    )
    day = models.DateField()
    refreshed_day = models.DateField()
    refreshed_at = models.DateTimeField()

    class Meta:
        db_table = "catalog_usagecursor"
        ordering = ["location"]
        constraints = [
            models.CheckConstraint(
                condition=Q(refreshed_day__lte=models.F("day")), name="usagecursor_refreshed_le_day"
            ),
        ]

    def __str__(self) -> str:
        return f"usage of location {self.location_id} through {self.day} (refreshed {self.refreshed_day})"
