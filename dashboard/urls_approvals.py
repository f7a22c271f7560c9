"""Pages of approvals, under /approvals/: the inbox (here) and a change request's buttons (``approvals.views``)."""

from django.urls import path

from approvals import views
from dashboard import views_approvals

app_name = "approvals"
urlpatterns = [
    path("", views_approvals.inbox, name="inbox"),
    path("changes/<int:pk>/approve/", views.approve, name="approve"),
    path("changes/<int:pk>/reject/", views.reject, name="reject"),
    path("changes/<int:pk>/cancel/", views.cancel, name="cancel"),
]
