"""Reads of access: people's API tokens as the tokens page lists them (never their hashes)."""

from __future__ import annotations

from django.db.models import F, QuerySet

from access.models import ApiToken

SHOWN = 100  # tokens listed per table; a person holds at most API_TOKENS_MAX_ACTIVE active ones


def tokens_of(user) -> QuerySet[ApiToken]:
    """``user``'s tokens, active first, then newest first."""
    return (
        ApiToken.objects.filter(user=user)
        .defer("token_hash")
        .order_by(F("revoked_at").desc(nulls_first=True), "-created_at", "-id")
    )


def active_tokens_of_others(user) -> QuerySet[ApiToken]:
    """Everyone else's active tokens, newest first: for an admin, who may revoke them."""
    return (
        ApiToken.objects.filter(revoked_at__isnull=True, user__is_active=True)
        .exclude(user=user)
        .select_related("user")
        .defer("token_hash")
        .order_by("-created_at", "-id")
    )


def active_token_count(user) -> int:
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).count()
