"""Who may do what: five roles, kept as Django groups, checked the same way by pages and the API.

Roles nest: finance can do what a viewer can, an operator what a viewer can, an admin everything.
An approver is a viewer who may also approve another person's deletion or change request (``approvals``),
release another person's governance hold, and lock a retention policy. Superusers hold every role.

    viewer    read every page and the API
    finance   viewer + spend exports and the price book
    operator  viewer + actions: pin, hold, promote, schedule deletion, scan, add buckets
    approver  viewer + approve deletions and changes asked for, and release governance holds placed, by someone
              else; lock retention policies
    admin     everything above

A person with none of these sees a 403 page naming whom to ask (``access.middleware``).
"""

from __future__ import annotations

from django.db import models

from access.refusals import Refusal, note_refusal
from ckptfleet.errors import NotAuthenticated, PermissionRefused


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    FINANCE = "finance", "Finance"
    OPERATOR = "operator", "Operator"
    APPROVER = "approver", "Approver"
    ADMIN = "admin", "Admin"


# The groups that grant each role: holding any one of them is enough.
GRANTED_BY: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset(Role.values),
    Role.FINANCE: frozenset({Role.FINANCE, Role.ADMIN}),
    Role.OPERATOR: frozenset({Role.OPERATOR, Role.ADMIN}),
    Role.APPROVER: frozenset({Role.APPROVER, Role.ADMIN}),
    Role.ADMIN: frozenset({Role.ADMIN}),
}


def _group_names(user) -> frozenset[str]:
    """Names of every group of ``user``, fetched once per request and cached on the user object."""
    cached = getattr(user, "_ckptfleet_groups", None)
    if cached is None:
        cached = frozenset(user.groups.values_list("name", flat=True))
        user._ckptfleet_groups = cached
    return cached


def roles_of(user) -> frozenset[str]:
    """The roles ``user`` holds (cached on the user object for the request). Host agents hold none."""
    if user is None or not user.is_authenticated or not getattr(user, "is_active", False):
        return frozenset()
    if not hasattr(user, "groups"):
        return frozenset()
    cached = getattr(user, "_ckptfleet_roles", None)
    if cached is not None:
        return cached
    if user.is_superuser:
        held = frozenset(Role.values)
    else:
        groups = _group_names(user)
        held = frozenset(role for role, granting in GRANTED_BY.items() if groups & granting)
    user._ckptfleet_roles = held
    return held


def has_role(user, role: str) -> bool:
    return role in roles_of(user)


def require_role(
    user,
    role: str,
    *,
    doing: str,
    target_type: str = "",
    target_id: int | None = None,
    target_label: str = "",
    source: str = "",
) -> None:
    """Raise ``PermissionRefused`` (naming the role and what was refused) unless ``user`` holds ``role``.

    The refusal is audited (``access.refused``) in its own transaction: after the request when called
    from a view, at once when called outside a transaction (see ``access.refusals``). Call it before
    opening the action's transaction.
    """
    if user is None or not user.is_authenticated:
        raise NotAuthenticated("sign in first")
    if has_role(user, role):
        return

    label = Role(role).label.lower()
    message = f"{doing} needs the {label} role, which {user_label(user)} lacks"
    note_refusal(
        Refusal(
            user=user,
            doing=doing,
            role=role,
            why=message,
            source=source,
            target_type=target_type,
            target_id=target_id,
            target_label=target_label,
        )
    )
    raise PermissionRefused(message)


def user_label(user) -> str:
    getter = getattr(user, "get_username", None)
    return getter() if getter else str(user)
