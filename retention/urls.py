"""Pages of retention, under /retention/."""

from django.urls import path

from retention import views, views_tiering

app_name = "retention"
urlpatterns = [
    path("", views.simulator, name="simulator"),
    path("tiering/", views.tiering, name="tiering"),
    path("tiering/policies/", views_tiering.policy_list, name="tiering-policies"),
    path("tiering/policies/<int:pk>/", views_tiering.policy_detail, name="tiering-policy"),
    path("tiering/policies/<int:pk>/run/", views_tiering.policy_run, name="tiering-policy-run"),
    path("policies/", views.policy_list, name="policies"),
    path("policies/<int:pk>/", views.policy_detail, name="policy"),
    path("policies/<int:pk>/lock/", views.policy_lock, name="policy-lock"),
]
