"""Each promise a deletion keeps is one rule function (actions.promises) with a stable code and its promise's
number; the preview, scheduling and the execution's re-check all answer with it."""

from __future__ import annotations

from actions import promises, services
from catalog.choices import Verification
from tests.actions.conftest import as_ui


def test_each_rule_refuses_with_its_code_and_promise_and_allows_otherwise(fleet, olga):
    checkpoint = fleet.checkpoints[100]
    nvme, pfs = fleet.copy(100, fleet.nvme), fleet.copy(100, fleet.pfs)
    assert promises.held(checkpoint) is None and promises.pinned(checkpoint) is None
    services.hold(run=checkpoint.run, checkpoint=checkpoint, reason="audit", case_ref="LEGAL-7", actor=as_ui(olga))
    held = promises.held(checkpoint)
    assert (held.code, held.promise) == ("held", 1) and "LEGAL-7" in held.message
    services.pin(checkpoint=checkpoint, reason="paper", actor=as_ui(olga))
    assert (promises.pinned(checkpoint).code, promises.pinned(checkpoint).promise) == ("pinned", 2)

    assert promises.last_verified_copy(checkpoint, nvme, [pfs]) is None  # another verified copy stays
    pfs.verification = Verification.UNVERIFIED
    last = promises.last_verified_copy(checkpoint, nvme, [pfs])
    assert (last.code, last.promise) == ("last_verified_copy", 5)
    nvme.verification = Verification.UNVERIFIED
    assert promises.last_verified_copy(checkpoint, nvme, [pfs]).promise == 6

    assert promises.disputed_copy(nvme) is None
    nvme.verification = Verification.DISPUTED
    assert (promises.disputed_copy(nvme).code, promises.disputed_copy(nvme).promise) == ("disputed", 10)

    newest = fleet.checkpoints[300]
    assert promises.newest_restorable_for_policy(newest, "manual", newest) is None
    refusal = promises.newest_restorable_for_policy(newest, "policy:3", newest)
    assert (refusal.code, refusal.promise) == ("newest_restorable", 5)


def test_the_preview_and_the_page_say_why_in_the_persons_words_and_name_the_code(fleet, olga, client):
    checkpoint = fleet.checkpoints[200]
    services.hold(run=checkpoint.run, checkpoint=checkpoint, reason="audit", case_ref="LEGAL-9", actor=as_ui(olga))
    preview = services.preview(checkpoint=checkpoint)
    assert (preview.refusal_code, preview.promise) == ("held", 1)
    assert (
        preview.promise_text == "Nothing under a hold is deleted, by anyone, until a different person releases the hold"
    )
    client.force_login(olga)
    html = client.get(f"/actions/checkpoints/{checkpoint.pk}/delete/").content.decode()
    assert "<code>held</code>" in html and "Nothing under a hold is deleted, by anyone" in html
    assert "promise" not in html.lower().split("<main", 1)[1]  # no product-internal numbering on the page
