"""Who may do what: five roles, kept as Django groups, checked the same way by pages and the API.

Roles nest: finance can do what a viewer can, an operator what a viewer can, an admin everything.
An approver is a viewer who may also approve another person's deletion. Superusers hold every role.

    viewer    read every page and the API
    finance   viewer + spend exports and the price book
    operator  viewer + actions: pin, hold, promote, schedule deletion, scan, add buckets
    approver  viewer + approve deletions scheduled by someone else
    admin     everything above
"""

from __future__ import annotations

from django.db import models

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


def roles_of(user) -> frozenset[str]:
    """The roles ``user`` holds (cached on the user object for the request)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return frozenset()
    cached = getattr(user, "_ckptfleet_roles", None)
    if cached is not None:
        return cached
    if user.is_superuser:
        held = frozenset(Role.values)
    else:
        groups = set(user.groups.filter(name__in=Role.values).values_list("name", flat=True))
        held = frozenset(role for role, granting in GRANTED_BY.items() if groups & granting)
    user._ckptfleet_roles = held
    return held


def has_role(user, role: str) -> bool:
    return role in roles_of(user)


def require_role(user, role: str, *, doing: str) -> None:
    """Raise ``PermissionRefused`` (naming the role and what was refused) unless ``user`` holds ``role``."""
    if user is None or not user.is_authenticated:
        raise NotAuthenticated("sign in first")
    if not has_role(user, role):
        raise PermissionRefused(f"{doing} needs the {Role(role).label.lower()} role, which {user.get_username()} lacks")
