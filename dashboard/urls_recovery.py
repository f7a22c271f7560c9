from django.urls import path

from dashboard import views_recovery

app_name = "recovery"
urlpatterns = [
    path("", views_recovery.search, name="search"),
    path("<int:pk>/", views_recovery.run, name="run"),
    path("<int:pk>/protect/", views_recovery.protect, name="protect"),
    path("<int:pk>/hosts/<int:host_id>/", views_recovery.host_state, name="host-state"),
]
