"""API routes of teams and their cost centers, under /api/v1/teams/ (``spend.api_teams``)."""

from django.urls import path

from spend.api_teams import TeamCostCenterView, TeamDetailView, TeamListView

app_name = "teams-api"
urlpatterns = [
    path("", TeamListView.as_view(), name="list"),
    path("<int:pk>/", TeamDetailView.as_view(), name="detail"),
    path("<int:pk>/cost-center/", TeamCostCenterView.as_view(), name="cost-center"),
]
