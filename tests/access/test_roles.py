"""Who may do what: every role against every kind of page, API read and write, and refusals audited."""

from __future__ import annotations

import pytest

from access.refusals import Refusal, note_refusal, refusals_collected
from access.roles import Role, require_role, roles_of
from audit.models import AuditEvent
from ckptfleet.errors import PermissionRefused
from fleet.models import Inventory, PricePoint
from fleet.pricebook import utc_today
from tests.helpers.access import bucket_with_a_running_scan

NO_ROLE = ""
ROLES = [NO_ROLE, *Role.values]

PAGES = ["/runs/", "/orphans/", "/fleet/", "/spend/", "/spend/prices/", "/audit/"]
API_READS = ["/api/v1/runs/", "/api/v1/checkpoints/", "/api/v1/hosts/", "/api/v1/spend/", "/api/v1/audit/"]


def refusals() -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="access.refused").order_by("pk"))


def sign_in(signed_in_as, role: str):
    return signed_in_as(*([role] if role else []))


# --- the roles themselves ----------------------------------------------------------------------------


def test_roles_nest_as_documented(db, signed_in_as):
    held = {role: roles_of(sign_in(signed_in_as, role).user) for role in ROLES}
    assert held[NO_ROLE] == frozenset()
    assert held[Role.VIEWER] == {Role.VIEWER}
    assert held[Role.FINANCE] == {Role.VIEWER, Role.FINANCE}
    assert held[Role.OPERATOR] == {Role.VIEWER, Role.OPERATOR}
    assert held[Role.APPROVER] == {Role.VIEWER, Role.APPROVER}
    assert held[Role.ADMIN] == set(Role.values)


def test_a_superuser_holds_every_role_and_an_inactive_person_none(db, django_user_model):
    root = django_user_model.objects.create_superuser(username="root", password="a-long-password-1")
    assert roles_of(root) == set(Role.values)
    gone = django_user_model.objects.create_superuser(username="gone", password="a-long-password-1", is_active=False)
    assert roles_of(gone) == frozenset()


# --- pages and API reads: any role reads, no role is told whom to ask ------------------------------


@pytest.mark.parametrize("role", ROLES)
def test_every_page_needs_a_role_and_without_one_says_whom_to_ask(db, signed_in_as, django_user_model, role):
    django_user_model.objects.create_superuser(username="boss", password="a-long-password-1")
    client = sign_in(signed_in_as, role)
    for url in PAGES:
        response = client.get(url)
        if role:
            assert response.status_code == 200, (role, url)
        else:
            assert response.status_code == 403, url
            html = response.content.decode()
            assert "have no role here yet" in html
            assert "boss" in html  # whom to ask
    assert not refusals()  # refused reads are not audited


@pytest.mark.parametrize("role", ROLES)
def test_every_api_read_needs_a_role_and_answers_json(db, signed_in_as, role):
    client = sign_in(signed_in_as, role)
    for url in API_READS:
        response = client.get(url)
        if role:
            assert response.status_code == 200, (role, url, response.content)
        else:
            assert response.status_code == 403, url
            body = response.json()
            assert body["error"] == "permission_denied"
            assert "holds no role" in body["detail"]
    assert not refusals()


def test_sign_in_out_and_health_need_no_role(db, client, signed_in_as):
    bare = sign_in(signed_in_as, NO_ROLE)
    assert bare.get("/healthz/").status_code == 200
    assert bare.get("/accounts/login/").status_code == 200
    assert bare.post("/accounts/logout/").status_code in (200, 302)
    assert client.get("/runs/").status_code == 302  # not signed in: to the login page, as before


def test_a_person_without_a_role_who_posts_is_refused_and_audited(db, signed_in_as):
    client = sign_in(signed_in_as, NO_ROLE)
    location = bucket_with_a_running_scan()
    response = client.post(f"/fleet/locations/{location.pk}/scan/")
    assert response.status_code == 403
    [event] = refusals()
    assert (event.actor_label, event.source, event.actor_id) == ("norole", "ui", client.user.pk)
    assert event.after["path"] == f"/fleet/locations/{location.pk}/scan/"
    assert event.after["method"] == "POST"
    api = client.post(f"/api/v1/locations/{location.pk}/scan/")
    assert api.status_code == 403
    assert "holds no role" in api.json()["detail"]
    api_event = refusals()[-1]
    assert (api_event.source, api_event.after["path"], api_event.after["role"]) == (
        "api",
        f"/api/v1/locations/{location.pk}/scan/",
        "viewer",
    )
    assert Inventory.objects.count() == 1  # nothing started


# --- writes: each needs its role, the same in pages and the API --------------------------------------

SCAN_ALLOWED = {Role.OPERATOR, Role.ADMIN}
FINANCE_ALLOWED = {Role.FINANCE, Role.ADMIN}


@pytest.mark.parametrize("role", Role.values)
def test_scan_now_needs_the_operator_role_on_the_page_and_the_api(db, signed_in_as, role):
    client = sign_in(signed_in_as, role)
    location = bucket_with_a_running_scan()
    page = client.post(f"/fleet/locations/{location.pk}/scan/", follow=True)
    api = client.post(f"/api/v1/locations/{location.pk}/scan/")
    html = page.content.decode()
    if role in SCAN_ALLOWED:
        assert "needs the operator role" not in html
        assert "already" in html  # got past the role check to the scan's own refusal
        assert api.status_code == 409, api.content
        assert not refusals()
    else:
        assert f"Scanning s3:ckpt-eu needs the operator role, which {role} lacks" in html
        assert api.status_code == 403
        assert api.json() == {
            "error": "forbidden",
            "detail": f"Scanning s3:ckpt-eu needs the operator role, which {role} lacks",
        }
        page_event, api_event = refusals()
        assert (page_event.source, api_event.source) == ("ui", "api")
        for event in (page_event, api_event):
            assert event.actor_label == role
            assert (event.target_type, event.target_id) == ("location", location.pk)
            assert event.after["role"] == "operator"
            assert "needs the operator role" in event.reason
            assert event.request_id
    assert Inventory.objects.count() == 1  # only the running one: nothing started


PRICE = {
    "scope": "kind",
    "kind": "nvme",
    "tier": "nvme",
    "basis": "tib_month",
    "price": "51.2",
    "currency": "USD",
    "source": "role test",
}


@pytest.mark.parametrize("role", Role.values)
def test_the_price_book_takes_prices_from_finance_and_admins_only(db, signed_in_as, role):
    client = sign_in(signed_in_as, role)
    today = utc_today().isoformat()
    page = client.get("/spend/prices/").content.decode()
    client.post("/spend/prices/", {**PRICE, "effective_from": today})
    api = client.post(
        "/api/v1/spend/price-points/",
        {"tier": "pfs", "kind": "pfs", "price": "0.2", "effective_from": today, "source": "role test"},
        content_type="application/json",
    )
    added = PricePoint.objects.filter(source="role test").count()
    if role in FINANCE_ALLOWED:
        assert "Add a price" in page
        assert api.status_code == 201
        assert added == 2
        assert not refusals()
    else:
        assert "Add a price" not in page
        assert api.status_code == 403
        assert "needs the finance role" in api.json()["detail"]
        assert added == 0
        assert [e.source for e in refusals()] == ["ui", "api"]


@pytest.mark.parametrize("role", Role.values)
def test_spend_exports_are_reads_like_the_page_and_the_json(db, signed_in_as, role):
    """One role model for every format: whoever reads the table on screen or as JSON may download its CSV."""
    client = sign_in(signed_in_as, role)
    page = client.get("/spend/").content.decode()
    export = client.get("/api/v1/spend/by-team/?format=csv")
    assert export.status_code == 200 and export["Content-Type"].startswith("text/csv")
    assert client.get("/api/v1/spend/by-team/").status_code == 200
    assert client.get("/spend/report/").status_code == 200
    assert "needs the finance role" not in page + export.content.decode()
    assert not refusals()


@pytest.mark.parametrize("role", Role.values)
def test_verifying_the_audit_chain_is_for_admins(db, signed_in_as, role):
    client = sign_in(signed_in_as, role)
    html = client.post("/audit/verify/", follow=True).content.decode()
    verified = AuditEvent.objects.filter(action="audit.verify")
    if role == Role.ADMIN:
        assert "The audit chain is intact" in html
        assert verified.count() == 1
    else:
        assert "Verifying the audit chain needs the admin role" in html
        assert not verified.exists()
        assert len(refusals()) == 1


# --- the refusal audit itself ---------------------------------------------------------------------


def test_a_refusal_inside_a_rolled_back_transaction_is_still_audited_after_the_request(db, signed_in_as):
    from django.db import transaction

    viewer = sign_in(signed_in_as, Role.VIEWER).user
    with refusals_collected(source="command"):
        with pytest.raises(PermissionRefused), transaction.atomic():
            require_role(viewer, Role.OPERATOR, doing="Pinning step 100", target_type="checkpoint", target_id=7)
        assert not refusals()  # not yet: the refused transaction is gone, the refusal waits
    [event] = refusals()
    assert (event.source, event.target_type, event.target_id) == ("command", "checkpoint", 7)
    assert event.reason == "Pinning step 100 needs the operator role, which viewer lacks"


def test_a_refusal_outside_any_transaction_is_written_at_once(transactional_db, signed_in_as):
    viewer = sign_in(signed_in_as, Role.VIEWER).user
    with pytest.raises(PermissionRefused):
        require_role(viewer, Role.APPROVER, doing="Approving deletion 3", source="command")
    [event] = refusals()
    assert event.after["role"] == "approver"


def test_one_refusal_noted_twice_in_a_request_is_one_event(db, signed_in_as):
    viewer = sign_in(signed_in_as, Role.VIEWER).user
    with refusals_collected(source="ui"):
        for _ in range(2):
            note_refusal(Refusal(user=viewer, doing="Holding run 1", role="operator"))
    assert len(refusals()) == 1


def test_a_granted_action_writes_no_refusal(db, signed_in_as):
    operator = sign_in(signed_in_as, Role.OPERATOR).user
    with refusals_collected(source="ui"):
        require_role(operator, Role.OPERATOR, doing="Pinning")
    assert not refusals()


def test_every_response_carries_a_request_id_and_keeps_a_sane_one_given(db, signed_in):
    assert len(signed_in.get("/runs/")["X-Request-ID"]) == 32
    assert signed_in.get("/runs/", HTTP_X_REQUEST_ID="trace-42")["X-Request-ID"] == "trace-42"
    assert signed_in.get("/runs/", HTTP_X_REQUEST_ID="bad id\n")["X-Request-ID"] != "bad id\n"


def test_the_signed_in_fixture_is_an_admin_and_signed_in_as_any_role(db, signed_in, signed_in_as):
    assert roles_of(signed_in.user) == set(Role.values)
    assert not signed_in.user.is_staff
    assert roles_of(signed_in_as("finance", "approver").user) == {"viewer", "finance", "approver"}
