"""Pages and API of promotions, included once from ``dashboard.site_urls``."""

from django.urls import include, path

from ckptfleet.routers import IdRouter
from promotion import views
from promotion.api.views import MoveViewSet, PromotionViewSet

app_name = "promotion"

router = IdRouter()
router.register("promotions", PromotionViewSet, basename="api-promotion")
router.register("moves", MoveViewSet, basename="api-move")

urlpatterns = [
    path("promotions/", views.job_list, name="job-list"),
    path("promotions/<int:pk>/", views.job_detail, name="job-detail"),
    path("promotions/<int:pk>/progress.json", views.job_progress, name="job-progress"),
    path("promotions/<int:pk>/cancel/", views.job_cancel, name="job-cancel"),
    path("checkpoints/<int:pk>/promote/", views.promote, name="promote"),
    path("checkpoints/<int:pk>/move/", views.move_checkpoint, name="move-checkpoint"),
    path("runs/<int:pk>/move/", views.move_run, name="move-run"),
    path("api/v1/", include(router.urls)),
]
