"""Admin of access: tokens are listed and revoked through ``manage.py api_token``, never edited here."""

from django.contrib import admin

from access.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "label", "created_at", "last_used_at", "revoked_at"]
    search_fields = ["=prefix", "user__username", "label"]
    raw_id_fields = ["user"]
    exclude = ["token_hash"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
