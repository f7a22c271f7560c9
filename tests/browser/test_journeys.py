"""The people of PRODUCT.md in real Chromium (Debian's, driven by Playwright) against the live app with demo data.

Each test seeds the demo fleet (``manage.py seed_demo``: real checkpoint trees on four hosts, one
person per role, a demo pin, hold and deletion), then people sign in through the login form and do
what their role is for: browse, recover a run at 3 a.m. with the keyboard, hold and release (two
people), schedule, approve and cancel a deletion, export CSVs. Every page any of them sees must load
without a console error, a failed request or an unexpected error status (``tests.browser.visitor``),
and is kept as a screenshot under $CKPTFLEET_ARTEFACTS (else <pytest basetemp>/screenshots).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db.models import Sum

from tests.conftest import give_roles
from tests.helpers.browser import Demo, checkpoint_of

pytestmark = [pytest.mark.services]

BYTES = re.compile(r"\b\d[\d,]*(\.\d+)? (B|KiB|MiB|GiB|TiB|PiB)\b")
MONEY = re.compile(r"\b\d[\d,]*\.\d{2} USD\b")


def another_operator(django_user_model, demo: Demo, username: str = "oncall-b"):
    user = django_user_model.objects.create_user(username=username, password=demo.password)
    give_roles(user, "operator")
    return user


# --- each role, the same pages -------------------------------------------------------------------

# username, may act (pin, hold, delete), may export spend (a read: every role), may verify the audit chain
ROLES = [
    ("demo-viewer", False, True, False),
    ("demo-finance", False, True, False),
    ("demo-operator", True, True, False),
    ("demo-approver", False, True, False),
    ("demo", True, True, True),  # the admin
]


def test_each_role_browses_and_sees_only_what_it_may_do(demo, person, django_user_model):
    from actions.models import Hold
    from catalog.models import ShardFile

    pinned = checkpoint_of("llama-tiny", 200)  # seed_demo pins it
    for username, may_act, may_export, may_verify in ROLES:
        who = person(username)
        page = who.page
        who.sign_in("/")  # the overview asks for a sign-in first, then comes back
        who.settle("overview")
        assert page.get_by_role("heading", name="Overview", exact=True).is_visible()
        assert page.get_by_role("heading", name="What needs attention").is_visible()
        assert BYTES.search(page.locator("main").inner_text()), "the overview shows no size with a unit"

        who.nav("Runs")
        who.click_and_settle(page.get_by_role("link", name="llama-tiny", exact=True), "run")
        panel = page.locator("section.actions-panel")
        assert panel.get_by_role("heading", name="Protection and actions").is_visible()
        hold_form = panel.get_by_text("Place a hold on every checkpoint of this run")
        assert hold_form.count() == (1 if may_act else 0), username
        assert panel.get_by_text("Pinning, holds and deletions need the operator role.").count() == (
            0 if may_act else 1
        ), username

        if username == "demo-viewer":
            # Not only hidden: the form posted anyway is refused with a readable message, and nothing changes.
            holds = Hold.objects.count()
            who.post_form(
                f"/actions/runs/{pinned.run_id}/hold/", {"case_ref": "X-1", "reason": "just looking"}, name="refused"
            )
            assert "Not held: placing a hold needs the operator role, which demo-viewer lacks" in " ".join(
                who.messages()
            )
            assert Hold.objects.count() == holds
        who.click_and_settle(page.get_by_role("link", name="Step 200", exact=True).first, "checkpoint")
        assert page.url.endswith(f"/checkpoints/{pinned.pk}/")
        panel = page.locator("section.actions-panel")
        assert panel.locator("li", has_text="demo: the checkpoint to restore from").is_visible()  # the pin, for all
        if may_act:  # the pin already forbids deleting it: said before any preview, and the preview is not offered
            assert panel.locator("#deletion-blocked").get_by_text("is pinned by demo-operator").is_visible()
            assert panel.locator("button", has_text="Preview what would be deleted").is_disabled()
        assert panel.get_by_role("button", name="Unpin").count() == (1 if may_act else 0), username
        assert panel.get_by_text("Schedule deletion", exact=True).count() == (1 if may_act else 0), username
        assert panel.locator("form[method=post]").count() == (3 if may_act else 0), username  # unpin, hold, lease

        if username == "demo-viewer":  # the recovery view shows a viewer everything but the protect form
            who.nav("Recover")
            page.keyboard.type("gpt-megatron")
            with page.expect_navigation():
                page.keyboard.press("Enter")
            who.settle("recovery")
            assert page.locator("#restore-title").is_visible()
            assert page.get_by_role("button", name="Pin and hold").count() == 0
            assert page.get_by_text("Pinning and holding need the operator role.").is_visible()

        who.nav("Spend")
        assert MONEY.search(page.locator("main").inner_text()), "the spend page shows no money with a currency"
        exports = page.locator("main a.export")
        assert (exports.count() >= 5) == may_export, username
        if username == "demo-finance":
            name, rows = who.download_csv(page.get_by_role("link", name="Export CSV of by team"))
            assert name.startswith("spend-by-team-") and name.endswith(".csv")
            by_team = {row["Team"]: row for row in rows}
            assert by_team["llm"]["Cost center"] == "CC-4100 Foundation models"
            # Money to six decimals, so a small team's fractions of a cent add up in a spreadsheet.
            assert re.fullmatch(r"\d+\.\d{6}", by_team["Total"]["Month to date (USD)"])
            stored = ShardFile.objects.filter(gone_at__isnull=True).aggregate(total=Sum("size"))["total"]
            assert int(by_team["Total"]["Stored (bytes)"]) == stored
            assert sum(int(r["Stored (bytes)"]) for t, r in by_team.items() if t != "Total") == stored

        who.nav("Audit")
        assert page.get_by_role("heading", name="Audit trail").is_visible()
        assert page.get_by_text("hold.place").first.is_visible()  # seed_demo's hold, by demo-operator
        if username == "demo-viewer":  # the refused hold is in the trail too
            assert page.locator("main tr", has_text="access.refused").filter(has_text="demo-viewer").count() >= 1
        assert page.get_by_role("button", name="Verify the chain now").count() == (1 if may_verify else 0)
        who.assert_clean()
        who.close()

    # A person with an account but no role gets the 403 page that says whom to ask, on every page.
    django_user_model.objects.create_user(username="newcomer", password=demo.password)
    who = person("newcomer")
    who.allow("/", 403)
    who.sign_in("/")
    who.settle("no role", status=403)
    assert who.page.get_by_role("heading", name="You are signed in, but have no role here yet").is_visible()
    assert who.page.get_by_text("To get one, ask").is_visible()
    assert "demo" in who.page.locator("main").inner_text()  # the admin to ask
    for path in ("/runs/", "/spend/", "/audit/", "/recovery/"):
        who.visit(path, status=403)
    who.assert_clean()


# --- the on-call engineer at 3 a.m. ----------------------------------------------------------------


def test_on_call_finds_a_run_with_the_keyboard_and_protects_its_checkpoint(demo, person):
    from actions.models import Hold, Pin

    who = person("demo-operator")
    page = who.page
    who.sign_in("/")
    who.settle("overview")
    who.nav("Recover")
    assert page.evaluate("document.activeElement.id") == "recovery-q", "the search box does not have the focus"

    # Several matches: a list to move through with the arrow keys.
    page.keyboard.type("tiny")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    who.settle("recovery matches")
    assert page.locator("[data-keyboard-list] a").count() == 4  # llama-, gpt2-, resnet-, ds-tiny
    for _ in range(4):
        page.keyboard.press("ArrowDown")
        if "llama-tiny" in page.evaluate("document.activeElement.textContent"):
            break
    else:
        pytest.fail("the arrow keys never reached llama-tiny in the matches")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    who.settle("recovery llama-tiny")
    restore = page.locator("#restore-title")
    assert "Restore from" in restore.inner_text() and "Step 200" in restore.inner_text()
    commands = page.locator(".recovery-copies code").all_inner_texts()
    root = demo.trees / "gpu-a01" / "nvme0"
    assert f"rsync -a --partial --info=progress2 gpu-a01:{root}/llm/llama-tiny/step-200/ ./step-200/" in commands
    assert page.get_by_role("button", name="Copy command").count() == len(commands) >= 2
    assert re.search(r"≈ \d", page.locator(".recovery-copy__time").first.inner_text())

    # Another run, one match: straight to its page. It is the one to protect for the incident.
    page.get_by_label("Another run").focus()
    page.keyboard.type("gpt-megatron")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    who.settle("recovery gpt-megatron")
    step300 = checkpoint_of("gpt-megatron", 300)
    assert "Step 300" in page.locator("#restore-title").inner_text()
    page.get_by_label("Incident reference").fill("INC-4211")
    page.get_by_label("Reason").fill("restoring after a node failure")
    who.click_and_settle(page.get_by_role("button", name="Pin and hold"), "protected")
    assert "step 300 is now pinned and held for INC-4211. No deletion can touch it." in " ".join(who.messages())
    assert page.get_by_text("Held: INC-4211 by demo-operator").is_visible()
    assert Pin.objects.filter(checkpoint=step300, unpinned_at__isnull=True).count() == 1
    hold = Hold.objects.get(checkpoint=step300, case_ref="INC-4211")
    assert hold.released_at is None and hold.placed_label == "demo-operator"

    # What it protects against: the deletion preview now refuses.
    who.visit(f"/actions/checkpoints/{step300.pk}/delete/", name="deletion refused")
    assert page.get_by_role("heading", name="This deletion cannot be scheduled").is_visible()
    assert page.get_by_role("button", name="Schedule deletion").count() == 0
    who.assert_clean()


# --- a hold takes two people -----------------------------------------------------------------------


def test_a_hold_placed_by_one_operator_is_released_only_by_another(demo, person, django_user_model):
    from actions.models import Hold

    another_operator(django_user_model, demo)
    step200 = checkpoint_of("gpt-megatron", 200)
    first = person("demo-operator")
    first.sign_in(f"/checkpoints/{step200.pk}/")
    first.settle("checkpoint")
    page = first.page
    form = page.locator("details.action", has_text="Place a hold on this checkpoint")
    form.locator("summary").click()
    form.get_by_label("Case reference").fill("LEGAL-2026-014")
    form.get_by_label("Reason").fill("preserve for the data-licensing review")
    first.click_and_settle(form.get_by_role("button", name="Place hold"), "held")
    assert (
        "Legal hold LEGAL-2026-014 placed on llm/gpt-megatron step 200. Only another person can release it."
        in first.messages()
    )
    hold = Hold.objects.get(case_ref="LEGAL-2026-014")
    assert hold.checkpoint_id == step200.pk and hold.released_at is None
    held = page.locator(".hold-list li", has_text="LEGAL-2026-014")
    assert held.get_by_text("You placed this hold, so another person must release it.").is_visible()
    assert held.get_by_role("button", name="Release hold").count() == 0

    # The same person posts the release anyway: a readable refusal, and the hold stays.
    first.post_form(f"/actions/holds/{hold.pk}/release/", {"reason": "case closed"}, name="release refused")
    assert (
        "Not released: demo-operator placed hold LEGAL-2026-014, so another person must release it "
        "(separation of duties)" in first.messages()
    )
    hold.refresh_from_db()
    assert hold.released_at is None

    # Another operator, in another browser, releases it.
    second = person("oncall-b")
    second.sign_in(f"/checkpoints/{step200.pk}/")
    second.settle("checkpoint")
    held = second.page.locator(".hold-list li", has_text="LEGAL-2026-014")
    held.get_by_label("Why release hold LEGAL-2026-014").fill("review finished, data cleared")
    second.click_and_settle(held.get_by_role("button", name="Release hold"), "released")
    assert "Hold LEGAL-2026-014 released." in second.messages()
    assert second.page.locator(".hold-list li", has_text="LEGAL-2026-014").count() == 0
    hold.refresh_from_db()
    assert hold.released_label == "oncall-b" and hold.release_reason == "review finished, data cleared"

    # The audit trail tells the story, and exports it: filtered to the case, as CSV.
    second.nav("Audit")
    second.page.get_by_label("Reason or case ref").fill("LEGAL-2026-014")
    second.click_and_settle(second.page.get_by_role("button", name="Filter"), "audit filtered")
    name, rows = second.download_csv(second.page.get_by_role("link", name="Export CSV of the filtered trail"))
    assert name.startswith("audit-trail-") and name.endswith(".csv")
    story = [(r["action"], r["actor"], r["case_ref"]) for r in rows]
    assert ("hold.place", "demo-operator", "LEGAL-2026-014") in story
    assert ("hold.release", "oncall-b", "LEGAL-2026-014") in story
    release = next(r for r in rows if r["action"] == "hold.release")
    assert release["reason"] == "review finished, data cleared" and release["target_type"] == "checkpoint"
    assert all(len(r["hash"]) == 64 for r in rows)
    first.assert_clean()
    second.assert_clean()


# --- a deletion: preview, schedule, approve, cancel ----------------------------------------------


def test_a_deletion_is_previewed_scheduled_approved_and_cancelled(demo, person, settings):
    from actions.models import DeletionJob, DeletionState

    # One approver's journey: step 300 is most of its demo run's bytes, above the default blast radius, whose
    # two approvers tests/actions/test_browser_approvals.py walks through.
    settings.BLAST_MAX_RUN_PERCENT = 100

    step300 = checkpoint_of("gpt-megatron", 300)  # the run's newest restorable checkpoint: needs approval
    operator = person("demo-operator")
    operator.sign_in(f"/checkpoints/{step300.pk}/")
    operator.settle("checkpoint")
    page = operator.page
    form = page.locator("details.action", has_text="Schedule deletion")
    form.locator("summary").click()
    form.get_by_label("What goes").select_option(value="")  # the whole checkpoint
    operator.click_and_settle(form.get_by_role("button", name="Preview what would be deleted"), "preview")

    stats = {
        dt: dd
        for dt, dd in zip(
            page.locator("dl.stats dt").all_inner_texts(), page.locator("dl.stats dd").all_inner_texts(), strict=True
        )
    }
    frees = next(v for k, v in stats.items() if k.lower() == "frees")
    saves = next(v for k, v in stats.items() if k.lower() == "saves per month")
    assert BYTES.fullmatch(frees.strip()), frees
    assert MONEY.fullmatch(saves.strip()), saves
    assert page.get_by_role("heading", name="Another person must approve it").is_visible()
    assert page.get_by_text("it removes the newest restorable checkpoint of the run").is_visible()
    files = [
        str(p)
        for p in (demo.trees / "lustre-gw1" / "lustre" / "llm" / "gpt-megatron").rglob("*")
        if p.is_file() and "iter_0000300" in str(p)
    ]
    assert files

    page.get_by_label("Reason").fill("superseded by the next run")
    operator.click_and_settle(page.get_by_role("button", name="Schedule deletion"), "scheduled")
    job = DeletionJob.objects.get(checkpoint=step300)
    assert page.url.endswith(f"/actions/deletions/{job.pk}/")
    assert any("needs another person's approval" in m for m in operator.messages())
    assert job.state == DeletionState.AWAITING_APPROVAL
    assert page.get_by_text("awaiting another person's approval").is_visible()
    assert page.get_by_role("button", name=f"Approve deletion {job.pk}").count() == 0  # not an approver

    approver = person("demo-approver")
    approver.sign_in(f"/actions/deletions/{job.pk}/")
    approver.settle("deletion")
    approver.click_and_settle(approver.page.get_by_role("button", name=f"Approve deletion {job.pk}"), "approved")
    assert f"Deletion {job.pk} approved; it runs once its grace period is over." in approver.messages()
    job.refresh_from_db()
    assert job.state == DeletionState.SCHEDULED and job.approved_label == "demo-approver"

    operator.visit(f"/actions/deletions/{job.pk}/", name="deletion approved")
    assert page.get_by_text("by demo-approver").first.is_visible()
    page.get_by_label("Why cancel it").fill("the next run failed; keep this one")
    operator.click_and_settle(page.get_by_role("button", name="Cancel deletion"), "cancelled")
    assert f"Deletion {job.pk} cancelled: nothing of it will be deleted." in operator.messages()
    job.refresh_from_db()
    assert job.state == DeletionState.CANCELLED and job.items_deleted == 0
    assert all(Path(f).exists() for f in files)
    assert page.get_by_role("button", name="Cancel deletion").count() == 0

    # The jobs page lists it where everyone looks, cancelled, with its progress in items.
    operator.nav("Jobs")
    row = page.locator("tr", has=page.get_by_role("link", name=re.compile(r"gpt-megatron step 300")))
    assert "Cancelled" in row.inner_text()
    progress = row.locator("[data-field=progress]").inner_text()
    assert re.search(rf"\b0 of {job.items_total} items\b", progress), f"/jobs/ shows the progress as {progress!r}"
    operator.assert_clean()
    approver.assert_clean()


# --- the checks themselves can fail --------------------------------------------------------------


def test_the_visitor_reports_console_errors_failed_requests_and_error_pages(live_server, person):
    """What every journey relies on: a broken page is reported, not passed over."""
    who = person("nobody", "no password")
    who.visit("/accounts/login/", name="login")
    who.page.evaluate("console.error('something broke')")
    who.page.evaluate("fetch('/static/no-such-file.js').catch(() => {})")
    who.page.wait_for_timeout(300)
    with pytest.raises(AssertionError) as caught:
        who.assert_clean()
    report = str(caught.value)
    assert "console error 'something broke'" in report
    assert "/static/no-such-file.js answered 404" in report
    who.problems.clear()
    with pytest.raises(AssertionError, match="answered 404, not 200"):
        who.visit("/no-such-page/")
