from django.urls import path

from actions import views, views_bulk

app_name = "actions"
urlpatterns = [
    path("checkpoints/<int:pk>/pin/", views.pin, name="pin"),
    path("pins/<int:pk>/unpin/", views.unpin, name="unpin"),
    path("checkpoints/<int:pk>/lease/", views.lease_take, name="lease-take"),
    path("leases/<int:pk>/release/", views.lease_release, name="lease-release"),
    path("runs/<int:pk>/hold/", views.hold, name="hold"),
    path("holds/<int:pk>/release/", views.release, name="release"),
    path("holds/<int:pk>/extend/", views.extend, name="extend"),
    path("checkpoints/<int:pk>/delete/", views.schedule, name="schedule"),
    path("deletions/", views.deletion_list, name="deletion-list"),
    path("deletions/<int:pk>/", views.deletion_detail, name="deletion-detail"),
    path("deletions/<int:pk>/approve/", views.approve, name="approve"),
    path("deletions/<int:pk>/cancel/", views.cancel, name="cancel"),
    path("deletions/<int:pk>/restore/", views.restore, name="restore"),
    path("deletions/<int:pk>/prove/", views.prove, name="prove"),
    path("orphans/cleanup/", views.orphan_cleanup, name="orphan-cleanup"),
    path("bulk/", views_bulk.bulk, name="bulk"),
    path("bulk/<slug:token>/", views_bulk.bulk_result, name="bulk-result"),
]
