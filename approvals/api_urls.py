"""API routes of approvals, under /api/v1/approvals/."""

from django.urls import path

from approvals import api

app_name = "approvals-api"
urlpatterns = [
    path("changes/", api.ChangeRequestListView.as_view(), name="changes"),
    path("changes/<int:pk>/", api.ChangeRequestDetailView.as_view(), name="change"),
    path("changes/<int:pk>/approve/", api.ChangeRequestApproveView.as_view(), name="approve"),
    path("changes/<int:pk>/reject/", api.ChangeRequestRejectView.as_view(), name="reject"),
    path("changes/<int:pk>/cancel/", api.ChangeRequestCancelView.as_view(), name="cancel"),
]
