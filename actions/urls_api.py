from django.urls import path

from actions.api import DeletionViewSet, HoldViewSet, PinViewSet
from actions.views_bulk import BulkApiView
from ckptfleet.routers import IdRouter

router = IdRouter()
router.register("pins", PinViewSet, basename="action-pin")
router.register("holds", HoldViewSet, basename="action-hold")
router.register("deletions", DeletionViewSet, basename="action-deletion")
urlpatterns = [path("bulk/", BulkApiView.as_view(), name="action-bulk"), *router.urls]
