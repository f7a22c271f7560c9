"""Retention's kinds of change request (``approvals.registry``), registered when the app starts."""

from __future__ import annotations

from django.urls import reverse

from access.scoping import restrict_policies
from approvals.registry import ChangeKind, register
from retention import services, tiering_policies
from retention.models import RetentionPolicy, TieringPolicy


def _visible_ids(user):
    return restrict_policies(RetentionPolicy.objects.all(), user).values("pk")


def _url(pk: int) -> str:
    return reverse("retention:policy", args=[pk])


def _tiering_visible_ids(user):
    return restrict_policies(TieringPolicy.objects.all(), user).values("pk")


def _tiering_url(pk: int) -> str:
    return reverse("retention:tiering-policy", args=[pk])


def register_kinds() -> None:
    for name, label in (
        ("retention_policy.update", "Edit a retention policy"),
        ("retention_policy.enable", "Enable a retention policy"),
    ):
        register(
            ChangeKind(
                name=name,
                target_type="retention_policy",
                label=label,
                apply=services.apply_change,
                describe=services.describe_change,
                visible_ids=_visible_ids,
                target_url=_url,
            )
        )
    for name, label in (
        ("tiering_policy.update", "Edit an enabled tiering policy"),
        ("tiering_policy.enable", "Enable a tiering policy"),
    ):
        register(
            ChangeKind(
                name=name,
                target_type="tiering_policy",
                label=label,
                apply=tiering_policies.apply_change,
                describe=tiering_policies.describe_change,
                visible_ids=_tiering_visible_ids,
                target_url=_tiering_url,
            )
        )
