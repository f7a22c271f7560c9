"""The API tokens page, under /account/tokens/ (``dashboard.views_tokens``)."""

from django.urls import path

from dashboard import views_tokens

app_name = "access"
urlpatterns = [
    path("", views_tokens.tokens, name="tokens"),
    path("<int:pk>/revoke/", views_tokens.revoke, name="token-revoke"),
]
