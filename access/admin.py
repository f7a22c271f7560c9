"""Admin of access: tokens are listed and revoked through ``manage.py api_token``, never edited here."""

from django.contrib import admin

from access.models import ApiToken
from ckptfleet.admin_base import ReadOnlyAdmin


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ["prefix", "user", "label", "created_at", "last_used_at", "revoked_at"]
    search_fields = ["=prefix", "user__username", "label"]
    raw_id_fields = ["user"]
    exclude = ["token_hash"]
