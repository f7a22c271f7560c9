"""API routes of recovery points and lineage (``dashboard.api.recovery_point``), under /api/v1/."""

from django.urls import path

from dashboard.api import recovery_point as views

urlpatterns = [
    path("runs/<int:pk>/recovery-point/", views.RunRecoveryPointView.as_view(), name="api-run-recovery-point"),
    path("runs/<int:pk>/gpus/", views.RunGpusView.as_view(), name="api-run-gpus"),
    path("runs/<int:pk>/rpo/", views.RunRpoView.as_view(), name="api-run-rpo"),
    path("runs/<int:pk>/lineage/", views.RunLineageView.as_view(), name="api-run-lineage"),
    path("runs/<int:pk>/parent/", views.RunParentView.as_view(), name="api-run-parent"),
    path("recovery/points/", views.FleetRecoveryPointsView.as_view(), name="api-recovery-points"),
    path("recovery/teams/<int:pk>/rpo/", views.TeamRpoView.as_view(), name="api-team-rpo"),
]
