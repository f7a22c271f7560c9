"""DRF permission classes: the API's side of the roles, refusing exactly what the pages refuse.

``HasRole`` is the default permission class (settings.REST_FRAMEWORK): every endpoint needs the viewer
role (any role) for reads; a view that changes something names its own role with ``role_required`` or
calls ``access.roles.require_role`` in its body, as the pages do. A refused write is audited; a
refused read is not.
"""

from __future__ import annotations

from rest_framework import permissions

# Only what DRF can import while ckptfleet.errors is loading (it reads this default at start).
VIEWER = "viewer"


def _is_host(user) -> bool:
    # A host agent is only ever authenticated by views that list HostTokenAuthentication: those
    # views decide what a host may see (its own inventories, its own deletions), not the roles.
    # fleet.api.auth.HostPrincipal says so (``is_host``); access sits below fleet and does not import it.
    return getattr(user, "is_host", False) is True


class HasRole(permissions.BasePermission):
    """Signed in with at least the role ``role`` (viewer, i.e. any role, unless a subclass says otherwise)."""

    role: str = VIEWER
    doing: str = ""

    def has_permission(self, request, view) -> bool:
        # DRF imports this module while ckptfleet.errors is still loading (its default permission class), and
        # these import ckptfleet.errors: they are read at the first request instead.
        from access.refusals import Refusal, note_refusal
        from access.roles import Role, has_role, user_label

        user = request.user
        if user is None or not user.is_authenticated:
            return False
        if _is_host(user):
            return True
        if has_role(user, self.role):
            return True
        label = Role(self.role).label.lower()
        doing = self.doing or f"{request.method} {request.path}"
        if self.role == Role.VIEWER:
            self.message = f"{user_label(user)} holds no role; ask an administrator for one (viewer for read access)"
        else:
            self.message = f"{doing} needs the {label} role, which {user_label(user)} lacks"
        if request.method not in permissions.SAFE_METHODS:
            note_refusal(Refusal(user=user, doing=doing, role=self.role, why=self.message))
        return False


def role_required(role: str, *, doing: str = "") -> type[HasRole]:
    """A permission class requiring ``role``: ``permission_classes = [role_required(Role.FINANCE)]``."""
    return type(f"Has{role.title()}Role", (HasRole,), {"role": role, "doing": doing})
