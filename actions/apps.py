from django.apps import AppConfig


class ActionsConfig(AppConfig):
    name = "actions"
    verbose_name = "Actions: pins, holds, deletions"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the Object Lock mirror task in web processes and workers alike.
        from actions import objectlock  # noqa: F401
        from actions.holdaudit import hold_problems
        from actions.protection import protection_reasons
        from actions.services import RELEASE_KIND, apply_release_change, describe_release
        from approvals.registry import ChangeKind, register
        from audit.verify import register_state_check
        from catalog import hooks

        # verify_audit also names a hold whose state no audit event accounts for (released by SQL, say).
        register_state_check(hold_problems)

        # The ingest never takes a copy or a file away from a protected checkpoint (catalog.services.Judge).
        hooks.on_protection_asked(protection_reasons)

        # A governance hold's release that an operator asks for waits in the approvals inbox for an approver.
        register(
            ChangeKind(
                name=RELEASE_KIND,
                target_type="hold",
                label="Release a governance hold",
                apply=apply_release_change,
                describe=describe_release,
                visible_ids=_visible_holds,
                target_url=_hold_url,
            )
        )


def _visible_holds(user):
    from access.scoping import restrict
    from actions.models import Hold

    return restrict(Hold.objects.all(), user).values("pk")


def _hold_url(pk: int) -> str:
    from django.urls import reverse

    from actions.models import Hold

    hold = Hold.objects.filter(pk=pk).values("checkpoint_id", "run_id").first()
    if hold is None:
        return ""
    if hold["checkpoint_id"]:
        return reverse("catalog:checkpoint-detail", args=[hold["checkpoint_id"]])
    return reverse("catalog:run-detail", args=[hold["run_id"]])
