"""Admin of the catalog: a read-only window on the data for staff.

Every change to runs, checkpoints, copies and the audit trail goes through a service that checks its
rules and writes its audit event (STYLE.md, 3). A form that saved model fields directly would skip
both, so these admins show and search, and never add, change or delete.
"""

from __future__ import annotations

from django.contrib import admin

from catalog.models import Checkpoint, CheckpointCopy, IngestRow, Run, ShardFile, Team, TeamCostCenter
from ckptfleet.admin_base import EstimatedCountPaginator, ReadOnlyAdmin
from ckptfleet.units import bytes_iec


@admin.register(Team)
class TeamAdmin(ReadOnlyAdmin):
    list_display = ["name", "cost_center"]
    search_fields = ["name", "cost_center"]


@admin.register(TeamCostCenter)
class TeamCostCenterAdmin(ReadOnlyAdmin):
    """The history, to read; it is set on the Teams page, the API or ``manage.py fleet_team`` (``catalog.teams``)."""

    list_display = ["team", "cost_center", "effective_from", "set_by_label", "set_at"]
    list_select_related = ["team"]
    search_fields = ["team__name", "cost_center"]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["name", "team", "status", "created_at"]
    list_filter = ["status"]
    list_select_related = ["team"]
    search_fields = ["name", "team__name"]
    raw_id_fields = ["team"]


@admin.register(Checkpoint)
class CheckpointAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "step", "tag", "importance", "first_seen_at"]
    list_filter = ["importance"]
    list_select_related = ["run__team"]
    search_fields = ["run__name", "run__team__name", "=step", "=tag"]
    raw_id_fields = ["run"]
    show_full_result_count = False


@admin.register(CheckpointCopy)
class CheckpointCopyAdmin(ReadOnlyAdmin):
    list_display = [
        "checkpoint",
        "location",
        "state",
        "verification",
        "format",
        "file_count",
        "size",
        "gone_at",
    ]
    list_filter = ["state", "verification", "temporary", "location__tier"]
    list_select_related = ["checkpoint__run__team", "location"]
    search_fields = ["path", "checkpoint__run__name", "location__name"]
    raw_id_fields = ["checkpoint", "location"]
    show_full_result_count = False

    @admin.display(description="size", ordering="bytes")
    def size(self, obj: CheckpointCopy) -> str:
        return bytes_iec(obj.bytes)


@admin.register(ShardFile)
class ShardFileAdmin(ReadOnlyAdmin):
    # Millions of rows: no list filters (each would scan for its choices), prefix search on the path
    # (an index range scan), and counts the table does not pay for.
    list_display = ["path", "location", "size_iec", "mtime", "copy_id", "gone_at"]
    list_select_related = ["location"]
    search_fields = ["^path"]
    raw_id_fields = ["location", "copy", "changed_by"]
    show_full_result_count = False
    paginator = EstimatedCountPaginator

    @admin.display(description="size", ordering="size")
    def size_iec(self, obj: ShardFile) -> str:
        return bytes_iec(obj.size)


@admin.register(IngestRow)
class IngestRowAdmin(ReadOnlyAdmin):
    list_display = ["path", "inventory_id", "size", "mtime"]
    search_fields = ["^path"]
    raw_id_fields = ["inventory"]
    show_full_result_count = False
    paginator = EstimatedCountPaginator
