"""API routes of retention, under /api/v1/retention/."""

from django.urls import path

from retention import api, api_tiering

app_name = "retention-api"
urlpatterns = [
    path("simulate/", api.SimulateView.as_view(), name="simulate"),
    path("tiering/", api.TieringView.as_view(), name="tiering"),
    path("policies/", api.PolicyListView.as_view(), name="policies"),
    path("policies/<int:pk>/", api.PolicyDetailView.as_view(), name="policy"),
    path("policies/<int:pk>/lock/", api.PolicyLockView.as_view(), name="policy-lock"),
    path("policies/<int:pk>/unlock/", api.PolicyUnlockView.as_view(), name="policy-unlock"),
    path("policies/<int:pk>/dry-run/", api.PolicyDryRunView.as_view(), name="policy-dry-run"),
    path("tiering-policies/", api_tiering.TieringPolicyListView.as_view(), name="tiering-policies"),
    path("tiering-policies/<int:pk>/", api_tiering.TieringPolicyDetailView.as_view(), name="tiering-policy"),
    path(
        "tiering-policies/<int:pk>/preview/",
        api_tiering.TieringPolicyPreviewView.as_view(),
        name="tiering-policy-preview",
    ),
    path("tiering-policies/<int:pk>/run/", api_tiering.TieringPolicyRunView.as_view(), name="tiering-policy-run"),
]
