"""``{% promotion_panel checkpoint %}``: the checkpoint page's promotions and the form to start one."""

from __future__ import annotations

from django import template

from access.roles import Role, has_role
from catalog.choices import Importance
from promotion import selectors
from promotion.choices import ItemState, RestoreTier
from promotion.forms import STORAGE_CLASSES
from promotion.moves import MOVE_CLASSES

register = template.Library()


@register.inclusion_tag("promotion/_panel.html", takes_context=True)
def promotion_panel(context, checkpoint):
    """Recent promotions and moves with live progress, and the forms that preview a new one (five queries)."""
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
        "move_targets": selectors.move_targets(),
        "move_classes": MOVE_CLASSES,
        "request": request,
    }


@register.inclusion_tag("promotion/_move_run.html", takes_context=True)
def move_run_form(context, run):
    """The run page's "Move this run's checkpoints" form, which previews the move first (one query)."""
    request = context.get("request")
    return {
        "run": run,
        "move_targets": selectors.move_targets(),
        "move_classes": MOVE_CLASSES,
        "importances": Importance.choices,
        "can_move": has_role(getattr(request, "user", None), Role.OPERATOR),
    }


@register.filter
def class_now(item, job) -> str:
    """The storage class a file of ``job`` is in now, as far as the job knows: a file it has copied or changed
    into ``target_storage_class`` is in that class; any other file is still in the class frozen when asked."""
    if item.state == ItemState.DONE and job.target_storage_class:
        return job.target_storage_class
    return item.source_storage_class
