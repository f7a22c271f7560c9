from django.urls import path

from dashboard import views

app_name = "catalog"
urlpatterns = [
    path("", views.run_list, name="home"),
    path("runs/", views.run_list, name="run-list"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/status/", views.run_status, name="run-status"),
    path("checkpoints/<int:pk>/", views.checkpoint_detail, name="checkpoint-detail"),
    path("copies/<int:pk>/files/", views.copy_files, name="copy-files"),
    path("orphans/", views.orphans, name="orphans"),
    path("placement/", views.placement_overview, name="placement"),
]
