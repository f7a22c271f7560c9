"""Pages of retention, under /retention/."""

from django.urls import path

from retention import views

app_name = "retention"
urlpatterns = [
    path("", views.simulator, name="simulator"),
    path("tiering/", views.tiering, name="tiering"),
    path("policies/", views.policy_list, name="policies"),
    path("policies/<int:pk>/", views.policy_detail, name="policy"),
    path("policies/<int:pk>/lock/", views.policy_lock, name="policy-lock"),
]
