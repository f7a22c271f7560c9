"""Pages of spend, under /spend/."""

from django.urls import path

from spend import views as views_spend
from spend import views_teams

app_name = "spend"
urlpatterns = [
    path("", views_spend.spend_overview, name="overview"),
    path("runs/", views_spend.spend_runs, name="runs"),
    path("runs/<int:pk>/", views_spend.spend_run, name="run"),
    path("prices/", views_spend.price_book, name="prices"),
    path("report/", views_spend.spend_report, name="report"),
    path("teams/", views_teams.team_list, name="teams"),
    path("teams/<int:pk>/", views_teams.team_detail, name="team"),
]
