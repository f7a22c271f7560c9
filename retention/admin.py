"""Retention policies in the admin: read-only, since every change must be audited (use the policy pages or API)."""

from django.contrib import admin

from ckptfleet.admin_base import ReadOnlyAdmin
from retention.models import RetentionPolicy


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(ReadOnlyAdmin):
    list_display = ("name", "team", "run", "keep_last", "keep_every", "enabled", "locked_at", "last_proposed_at")
    list_filter = ("enabled",)
    search_fields = ("name", "team__name", "run__name")
