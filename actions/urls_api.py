from rest_framework.routers import SimpleRouter

from actions.api import DeletionViewSet, HoldViewSet, PinViewSet

router = SimpleRouter()
router.register("pins", PinViewSet, basename="action-pin")
router.register("holds", HoldViewSet, basename="action-hold")
router.register("deletions", DeletionViewSet, basename="action-deletion")
urlpatterns = router.urls
