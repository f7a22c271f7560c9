"""The product's own error pages: 404, 403 and 500 outside debug, and in the demo (DEBUG on, CKPTFLEET_ERROR_PAGES=1)
instead of Django's technical pages, which list the URL patterns or show a traceback."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import path

from dashboard import site_urls


def boom(request):
    raise RuntimeError("a bug in a view")


def refused(request):
    raise PermissionDenied("exporting spend needs the finance role")


# The site's own URLs and handlers, plus two views that fail.
urlpatterns = [path("test-boom/", boom), path("test-refused/", refused), *site_urls.urlpatterns]
handler404 = site_urls.handler404

pytestmark = [pytest.mark.urls(__name__), pytest.mark.django_db]

TECHNICAL = ("Using the URLconf", "Traceback", "Request Method:", "DEBUG = True")


def get(url: str, user=None) -> tuple[int, str]:
    client = Client(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    response = client.get(url)
    return response.status_code, response.content.decode()


def technical(html: str) -> list[str]:
    return [marker for marker in TECHNICAL if marker in html]


@pytest.fixture
def person(django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("vera", password="x")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    return user


def test_outside_debug_a_missing_page_a_refusal_and_a_bug_get_the_products_pages(settings, person):
    settings.DEBUG = False
    status, html = get("/no-such-page/", person)
    assert status == 404 and "There is nothing at this address" in html and not technical(html)
    status, html = get("/test-refused/", person)
    assert status == 403 and "You are not allowed to do that" in html and "needs the finance role" in html
    status, html = get("/test-boom/", person)
    assert status == 500 and "Something went wrong on our side" in html and not technical(html)
    assert "a bug in a view" not in html


def test_the_demo_shows_the_products_404_and_500_pages_although_debug_is_on(settings, person):
    settings.DEBUG = True
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "ckptfleet.middleware.ErrorPagesInDebugMiddleware"]
    status, html = get("/no-such-page/", person)
    assert status == 404 and "There is nothing at this address" in html and not technical(html)
    status, html = get("/runs/999999/", person)  # a view's own "no such run"
    assert status == 404 and not technical(html)
    status, html = get("/test-boom/", person)
    assert status == 500 and "Something went wrong on our side" in html and not technical(html)
    # The API is left to its own answers (a program reads them, not a person).
    status, html = get("/api/v1/no-such-thing/", person)
    assert status == 404 and "There is nothing at this address" not in html


def test_without_the_setting_debug_keeps_djangos_technical_404(settings, person):
    settings.DEBUG = True
    status, html = get("/no-such-page/", person)
    assert status == 404 and technical(html)
