"""``{% recovery_point_section run %}`` and ``{% lineage_section run %}``: the recovery point and lineage
sections of the recovery and run pages, computed here so the pages' views need not change."""

from __future__ import annotations

from django import template

from access.roles import Role, has_role
from catalog.lineage import lineage_of
from catalog.recovery_point import recovery_point_of

register = template.Library()


@register.inclusion_tag("recovery/_recovery_point_card.html", takes_context=True)
def recovery_point_section(context, run):
    request = context.get("request")
    user = getattr(request, "user", None)
    point = context.get("recovery_point")  # the view's, when it computed it already
    return {
        "run": run,
        "point": point if point is not None and point.run.pk == run.pk else recovery_point_of(run),
        "may_set": has_role(user, Role.OPERATOR),
        "csrf_token": context.get("csrf_token"),
        "next": request.get_full_path() if request is not None else "",
    }


@register.inclusion_tag("catalog/_lineage_card.html", takes_context=True)
def lineage_section(context, run):
    request = context.get("request")
    user = getattr(request, "user", None)
    return {
        "run": run,
        "lineage": lineage_of(run, user),
        "may_set": has_role(user, Role.OPERATOR),
        "csrf_token": context.get("csrf_token"),
        "next": request.get_full_path() if request is not None else "",
    }
