from django.urls import path

from actions.api import DeletionViewSet, HoldViewSet, PinViewSet
from actions.api_leases import LeaseListView, LeaseReleaseView, LeaseRenewView
from actions.views_bulk import BulkApiView
from ckptfleet.routers import IdRouter

router = IdRouter()
router.register("pins", PinViewSet, basename="action-pin")
router.register("holds", HoldViewSet, basename="action-hold")
router.register("deletions", DeletionViewSet, basename="action-deletion")
urlpatterns = [
    path("bulk/", BulkApiView.as_view(), name="action-bulk"),
    path("leases/", LeaseListView.as_view(), name="action-leases"),
    path("leases/<int:pk>/renew/", LeaseRenewView.as_view(), name="action-lease-renew"),
    path("leases/<int:pk>/release/", LeaseReleaseView.as_view(), name="action-lease-release"),
    *router.urls,
]
