"""People's API tokens for scripts: hashed, shown once, revocable, acting with the person's roles."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from access.models import ApiToken
from access.services import api_token_create, api_token_revoke, token_hash
from audit.actor import Actor
from audit.models import AuditEvent
from ckptfleet.errors import DomainError
from tests.conftest import give_roles
from tests.helpers.access import bucket_with_a_running_scan


@pytest.fixture
def ada(db, django_user_model):
    user = django_user_model.objects.create_user(username="ada", password="a-long-password-1")
    give_roles(user, "viewer")
    return user


def bearer(raw: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def test_a_token_is_stored_hashed_shown_once_and_its_creation_audited(ada):
    token, raw = api_token_create(user=ada, label="nightly report", actor=Actor.command(label="tests"))
    assert raw.startswith(f"cfu_{token.prefix}_")
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.token_hash == token_hash(raw)
    assert raw not in str(stored.__dict__)
    event = AuditEvent.objects.get(action="api_token.create")
    assert (event.target_type, event.target_id, event.after["token_prefix"]) == ("user", ada.pk, token.prefix)
    assert raw not in str(event.after)


def test_a_script_reads_the_api_with_its_token_and_the_persons_roles(ada, client):
    _, raw = api_token_create(user=ada, actor=Actor.command())
    assert client.get("/api/v1/runs/", **bearer(raw)).status_code == 200
    assert ApiToken.objects.get().last_used_at is not None
    # Token requests skip CSRF (no cookie is involved) but a viewer still may not scan.
    location = bucket_with_a_running_scan()
    refused = client.post(f"/api/v1/locations/{location.pk}/scan/", **bearer(raw))
    assert refused.status_code == 403
    assert "needs the operator role, which ada lacks" in refused.json()["detail"]
    assert AuditEvent.objects.get(action="access.refused").source == "api"
    give_roles(ada, "operator")
    assert client.post(f"/api/v1/locations/{location.pk}/scan/", **bearer(raw)).status_code == 409  # running


def test_a_revoked_unknown_or_deactivated_persons_token_is_refused(ada, client):
    _, raw = api_token_create(user=ada, actor=Actor.command())
    assert client.get("/api/v1/runs/", **bearer(raw + "x")).status_code in (401, 403)
    ada.is_active = False
    ada.save(update_fields=["is_active"])
    assert client.get("/api/v1/runs/", **bearer(raw)).status_code in (401, 403)
    ada.is_active = True
    ada.save(update_fields=["is_active"])
    assert client.get("/api/v1/runs/", **bearer(raw)).status_code == 200
    assert api_token_revoke(user=ada, actor=Actor.command()) == 1
    response = client.get("/api/v1/runs/", **bearer(raw))
    assert response.status_code == 401
    assert response.json() == {"error": "not_authenticated", "detail": "unknown or revoked API token"}
    assert AuditEvent.objects.get(action="api_token.revoke").after == {"revoked": 1}


def test_a_host_agents_token_is_no_persons_token(make_host, client):
    kit = make_host()
    for method, url in (("get", "/api/v1/runs/"), ("post", "/api/v1/actions/pins/")):
        response = getattr(client, method)(url, **kit.auth())
        # 401 (not 403): the request is not authenticated, and says how to authenticate.
        assert response.status_code == 401, url
        assert response["WWW-Authenticate"] == "Bearer"
        assert response.json()["error"] == "not_authenticated"
        assert "host agent's token" in response.json()["detail"]
    assert not AuditEvent.objects.filter(action="access.refused").exists()


def test_no_credentials_at_all_is_a_401_that_names_the_scheme(client):
    response = client.get("/api/v1/runs/")
    assert (response.status_code, response["WWW-Authenticate"]) == (401, "Bearer")
    assert response.json()["error"] == "not_authenticated"


def test_revoking_nothing_is_refused_and_changes_nothing(ada):
    with pytest.raises(DomainError, match="no active token"):
        api_token_revoke(user=ada, actor=Actor.command())
    assert not AuditEvent.objects.filter(action="api_token.revoke").exists()


def test_the_command_creates_prints_once_lists_and_revokes(ada, capsys):
    call_command("api_token", "create", "ada", "--label", "ci")
    out = capsys.readouterr()
    raw = out.out.strip()
    assert raw.startswith("cfu_") and "shown only now" in out.err
    token = ApiToken.objects.get(user=ada)
    call_command("api_token", "list", "ada")
    listing = capsys.readouterr().out
    assert token.prefix in listing and "active" in listing and raw not in listing
    call_command("api_token", "revoke", "ada", "--prefix", token.prefix)
    assert "revoked 1 token of ada" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no user named"):
        call_command("api_token", "create", "nobody")
    with pytest.raises(CommandError, match="no active token"):
        call_command("api_token", "revoke", "ada")
