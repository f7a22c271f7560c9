"""Services of access: people's API tokens (issued, revoked) and the audit chain's verification, each audited."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from access.models import ApiToken
from audit.actor import Actor
from audit.choices import VerificationTrigger
from audit.services import audit
from audit.verify import record_report
from ckptfleet.errors import DomainError, NotAuthenticated

TOKEN_PREFIX = "cfu"  # noqa: S105 - a public prefix; host agents' tokens start with "cfh"
# A token's last use is written at most this often, so that a busy script does not write on every call.
LAST_USED_RESOLUTION = timedelta(minutes=5)
# Active tokens a person may hold at once: one per script or machine is plenty, and a cap keeps a leaked
# session from minting tokens without end. Revoking one makes room.
API_TOKENS_MAX_ACTIVE = 20


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_token_create(*, user, label: str = "", actor: Actor, request_id: str = "") -> tuple[ApiToken, str]:
    """Issue a token for ``user``; returns it and the raw token, which is never stored or shown again.

    At most ``API_TOKENS_MAX_ACTIVE`` active tokens per person (counted under a lock of the person's row).
    """
    if not user.is_active:
        raise DomainError(f"{user.get_username()} is deactivated; activate the account first", code="inactive")
    label = label.strip()
    if len(label) > 100:
        raise DomainError("a token's label is at most 100 characters", code="invalid")
    prefix = secrets.token_hex(6)
    raw = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        get_user_model().objects.select_for_update(of=("self",)).filter(pk=user.pk).first()
        active = ApiToken.objects.filter(user=user, revoked_at__isnull=True).count()
        if active >= API_TOKENS_MAX_ACTIVE:
            raise DomainError(
                f"{user.get_username()} already has {active} active API tokens, the most one person may hold; "
                "revoke one that is no longer used first",
                code="too_many_tokens",
                http_status=409,
            )
        token = ApiToken.objects.create(user=user, prefix=prefix, token_hash=token_hash(raw), label=label)
        audit(
            actor,
            "api_token.create",
            target_type="user",
            target_id=user.pk,
            target_label=user.get_username(),
            after={"token_prefix": prefix, "label": label},
            request_id=request_id,
        )
    return token, raw


def api_token_revoke(*, user, actor: Actor, prefix: str = "", request_id: str = "") -> int:
    """Revoke ``user``'s active tokens (only the one with ``prefix`` when given); returns how many."""
    with transaction.atomic():
        tokens = ApiToken.objects.select_for_update(of=("self",)).filter(user=user, revoked_at__isnull=True)
        if prefix:
            tokens = tokens.filter(prefix=prefix)
        prefixes = list(tokens.values_list("prefix", flat=True))
        if not prefixes:
            which = f"with prefix {prefix!r} " if prefix else ""
            raise DomainError(f"{user.get_username()} has no active token {which}to revoke", code="not_found")
        ApiToken.objects.filter(prefix__in=prefixes).update(revoked_at=timezone.now())
        audit(
            actor,
            "api_token.revoke",
            target_type="user",
            target_id=user.pk,
            target_label=user.get_username(),
            before={"active_prefixes": prefixes},
            after={"revoked": len(prefixes)},
            request_id=request_id,
        )
    return len(prefixes)


def api_token_authenticate(raw: str):
    """The person a raw token belongs to; ``NotAuthenticated`` for an unknown, revoked or inactive one."""
    token = (
        ApiToken.objects.select_related("user")
        .filter(token_hash=token_hash(raw), revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if token is None:
        raise NotAuthenticated("unknown or revoked API token")
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user, token


AUDIT_VERIFY_ACTION = "audit.verify"


def audit_chain_verify(*, actor: Actor, request_id: str = ""):
    """Walk the whole audit chain, compare it with its anchors, keep the result (audit.verify.record_report) and
    append it as an ``audit.verify`` event; returns that event.

    The walk reads every event (about 75 µs each on PostgreSQL), so people start it as a task.
    """

    report, _ = record_report(trigger=VerificationTrigger.PERSON)
    why = report.problems[0] if report.problems else ""
    with transaction.atomic():
        return audit(
            actor,
            AUDIT_VERIFY_ACTION,
            target_type="audit_chain",
            target_label="audit chain",
            after={
                "intact": report.ok,
                "checked": report.events_checked,
                "anchors_checked": report.anchors_checked,
                "broken_event": report.broken_event,
                "why": why,
            },
            request_id=request_id,
        )
