"""``{% promotion_panel checkpoint %}``: the checkpoint page's promotions and the form to start one."""

from __future__ import annotations

from django import template

from access.roles import Role, has_role
from promotion import selectors
from promotion.choices import RestoreTier
from promotion.forms import STORAGE_CLASSES

register = template.Library()


@register.inclusion_tag("promotion/_panel.html", takes_context=True)
def promotion_panel(context, checkpoint):
    """Recent promotions with live progress, and a form that previews a new one (four queries)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    return {
        "checkpoint": checkpoint,
        "jobs": selectors.checkpoint_jobs(checkpoint),
        "copies": selectors.promotable_copies(checkpoint),
        "targets": selectors.target_locations(),
        "storage_classes": STORAGE_CLASSES,
        "restore_tiers": RestoreTier.choices,
        "can_promote": has_role(user, Role.OPERATOR),
        "request": request,
    }
