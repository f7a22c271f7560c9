"""Access: API tokens of people, for scripts. Roles are Django groups (``access.roles``) and need no model."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    """A person's API token for scripts. Only its SHA-256 is kept; the token itself is shown once.

    A token acts as its person, with that person's roles at the moment of each request; revoking
    it (or deactivating the person) stops it at once.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    prefix = models.CharField(max_length=16, unique=True, help_text="The public part, to tell tokens apart.")
    token_hash = models.CharField(max_length=64, unique=True)
    label = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        state = "revoked" if self.revoked_at else "active"
        return f"cfu_{self.prefix}_… of {self.user} ({state})"
