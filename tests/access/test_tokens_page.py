"""The API tokens page: a person creates, lists and revokes their own tokens; the raw token is shown once."""

from __future__ import annotations

import pytest
from django.test import Client

from access.models import ApiToken
from access.services import API_TOKENS_MAX_ACTIVE, api_token_create, token_hash
from audit.actor import Actor
from audit.models import AuditEvent

URL = "/account/tokens/"


def bearer(raw: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def _raw_from(page: str) -> str:
    start = page.index("data-token>") + len("data-token>")
    return page[start : page.index("<", start)]


def test_the_empty_page_says_how_to_start(signed_in_as):
    page = signed_in_as("viewer").get(URL)
    assert page.status_code == 200
    text = page.content.decode()
    assert "You have no API tokens yet" in text
    assert "Authorization: Bearer" in text
    assert "0 of 20 active tokens" in text


def test_a_token_is_created_shown_once_works_and_is_audited(signed_in_as):
    client = signed_in_as("viewer")
    created = client.post(URL, {"label": "  nightly   spend export "})
    assert created.status_code == 201
    assert "no-store" in created["Cache-Control"]
    page = created.content.decode()
    raw = _raw_from(page)
    assert raw.startswith("cfu_")
    assert f'curl -H "Authorization: Bearer {raw}" http://testserver/api/v1/runs/' in page
    token = ApiToken.objects.get()
    assert (token.label, token.token_hash, token.user) == ("nightly spend export", token_hash(raw), client.user)
    event = AuditEvent.objects.get(action="api_token.create")
    assert (event.actor_label, event.source, event.target_id) == (client.user.username, "ui", client.user.pk)
    assert raw not in str(event.after)

    # Shown once: the list afterwards has its prefix, never the token.
    listed = client.get(URL).content.decode()
    assert f"cfu_{token.prefix}_…" in listed
    assert raw not in listed
    assert "nightly spend export" in listed

    assert Client().get("/api/v1/runs/", **bearer(raw)).status_code == 200


def test_revoking_stops_the_token_at_once_and_is_audited(signed_in_as):
    client = signed_in_as("viewer")
    token, raw = api_token_create(user=client.user, label="ci", actor=Actor.command())
    answer = client.post(f"{URL}{token.pk}/revoke/", follow=True)
    assert answer.redirect_chain == [(URL, 302)]
    assert "is revoked: requests with it are refused from now on" in answer.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    event = AuditEvent.objects.get(action="api_token.revoke")
    assert (event.actor_label, event.before["active_prefixes"]) == (client.user.username, [token.prefix])
    assert Client().get("/api/v1/runs/", **bearer(raw)).status_code == 401
    # Revoking it again changes nothing and says why.
    again = client.post(f"{URL}{token.pk}/revoke/", follow=True).content.decode()
    assert "Not revoked" in again
    assert AuditEvent.objects.filter(action="api_token.revoke").count() == 1


def test_revoke_is_a_post_with_csrf(signed_in_as, django_user_model):
    client = signed_in_as("viewer")
    token, _ = api_token_create(user=client.user, label="ci", actor=Actor.command())
    assert client.get(f"{URL}{token.pk}/revoke/").status_code == 405
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(client.user)
    assert strict.post(f"{URL}{token.pk}/revoke/").status_code == 403
    assert strict.post(URL, {"label": "x"}).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None
    assert ApiToken.objects.count() == 1


def test_a_person_cannot_see_or_revoke_anothers_token(signed_in_as, django_user_model):
    ada = signed_in_as("operator", username="ada")
    grace = signed_in_as("operator", username="grace")
    theirs, _ = api_token_create(user=grace.user, label="grace's export", actor=Actor.command())
    assert "grace's export" not in ada.get(URL).content.decode()
    assert ada.post(f"{URL}{theirs.pk}/revoke/").status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None
    assert not AuditEvent.objects.filter(action="api_token.revoke").exists()


def test_an_admin_sees_and_revokes_others_tokens_but_never_the_token(signed_in_as):
    grace = signed_in_as("viewer", username="grace")
    theirs, raw = api_token_create(user=grace.user, label="leaked one", actor=Actor.command())
    admin = signed_in_as("admin", username="root")
    page = admin.get(URL).content.decode()
    assert "Other people's active tokens" in page
    assert "leaked one" in page and f"cfu_{theirs.prefix}_…" in page
    assert raw not in page
    answer = admin.post(f"{URL}{theirs.pk}/revoke/", follow=True).content.decode()
    assert "grace&#x27;s token" in answer
    theirs.refresh_from_db()
    assert theirs.revoked_at is not None
    assert AuditEvent.objects.get(action="api_token.revoke").actor_label == "root"


@pytest.mark.parametrize(
    ("label", "why"),
    [("", "Give the token a label"), ("   ", "Give the token a label"), ("x" * 101, "at most 100 characters")],
)
def test_a_bad_label_is_a_400_that_creates_nothing(signed_in_as, label, why):
    answer = signed_in_as("viewer").post(URL, {"label": label})
    assert answer.status_code == 400
    assert why in answer.content.decode()
    assert not ApiToken.objects.exists()
    assert not AuditEvent.objects.filter(action="api_token.create").exists()


def test_a_person_holds_at_most_twenty_active_tokens(signed_in_as):
    client = signed_in_as("viewer")
    for n in range(API_TOKENS_MAX_ACTIVE):
        api_token_create(user=client.user, label=f"t{n}", actor=Actor.command())
    assert "the most one person may hold" in client.get(URL).content.decode()
    refused = client.post(URL, {"label": "one more"})
    assert refused.status_code == 409
    assert "already has 20 active API tokens" in refused.content.decode()
    assert ApiToken.objects.count() == API_TOKENS_MAX_ACTIVE
    # Revoking one makes room.
    client.post(f"{URL}{ApiToken.objects.first().pk}/revoke/")
    assert client.post(URL, {"label": "one more"}).status_code == 201


def test_the_page_needs_a_sign_in(client):
    answer = client.get(URL)
    assert answer.status_code == 302
    assert answer["Location"].startswith("/accounts/login/")


def test_the_page_lists_in_constant_queries(signed_in_as, django_assert_max_num_queries):
    client = signed_in_as("admin")
    for n in range(5):
        api_token_create(user=client.user, label=f"t{n}", actor=Actor.command())
    with django_assert_max_num_queries(12):
        assert client.get(URL).status_code == 200


def test_the_command_names_the_people_there_are_for_an_unknown_one(signed_in_as):
    from django.core.management import CommandError, call_command

    signed_in_as("viewer", username="grace")
    with pytest.raises(CommandError, match=r"no user named 'ada' \(people: grace\)"):
        call_command("api_token", "create", "ada")
    assert not ApiToken.objects.exists()
