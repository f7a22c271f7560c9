"""API routes of retention, under /api/v1/retention/."""

from django.urls import path

from retention import api

app_name = "retention-api"
urlpatterns = [
    path("simulate/", api.SimulateView.as_view(), name="simulate"),
    path("tiering/", api.TieringView.as_view(), name="tiering"),
    path("policies/", api.PolicyListView.as_view(), name="policies"),
    path("policies/<int:pk>/", api.PolicyDetailView.as_view(), name="policy"),
    path("policies/<int:pk>/lock/", api.PolicyLockView.as_view(), name="policy-lock"),
    path("policies/<int:pk>/unlock/", api.PolicyUnlockView.as_view(), name="policy-unlock"),
    path("policies/<int:pk>/dry-run/", api.PolicyDryRunView.as_view(), name="policy-dry-run"),
]
