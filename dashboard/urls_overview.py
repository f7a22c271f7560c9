from django.urls import path

from dashboard import views_overview

app_name = "overview"
urlpatterns = [
    path("", views_overview.overview, name="overview"),
    path("queue/copies/", views_overview.copy_queue, name="copy-queue"),
]
