from django.urls import path

from dashboard import views_recovery, views_recovery_point

app_name = "recovery"
urlpatterns = [
    path("", views_recovery.search, name="search"),
    path("<int:pk>/", views_recovery.run, name="run"),
    path("<int:pk>/protect/", views_recovery.protect, name="protect"),
    path("<int:pk>/hosts/<int:host_id>/", views_recovery.host_state, name="host-state"),
    path("points/", views_recovery_point.points, name="points"),
    path("teams/rpo/", views_recovery_point.set_team_rpo, name="team-rpo"),
    path("<int:pk>/gpus/", views_recovery_point.set_gpus, name="gpus"),
    path("<int:pk>/rpo/", views_recovery_point.set_rpo, name="rpo"),
    path("<int:pk>/parent/", views_recovery_point.set_parent, name="parent"),
]
