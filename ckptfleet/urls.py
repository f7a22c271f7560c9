"""URL map: pages, the admin, the API and its schema."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from catalog.api.views import CheckpointViewSet, OrphanListView, RunViewSet
from ckptfleet.health import healthz
from fleet.api.views import (
    HostViewSet,
    InventoryDetailView,
    InventoryUploadView,
    InventoryViewSet,
    StorageLocationViewSet,
)

router = DefaultRouter()
router.register("runs", RunViewSet, basename="run")
router.register("checkpoints", CheckpointViewSet, basename="checkpoint")
router.register("hosts", HostViewSet, basename="host")
router.register("locations", StorageLocationViewSet, basename="location")
router.register("inventory-list", InventoryViewSet, basename="inventory")

api = [
    path("inventories/", InventoryUploadView.as_view(), name="inventory-upload"),
    path("inventories/<int:pk>/", InventoryDetailView.as_view(), name="inventory-detail-status"),
    path("orphans/", OrphanListView.as_view(), name="orphan-list"),
    path("spend/", include("catalog.api.urls_spend")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("", include(router.urls)),
]

urlpatterns = [
    path("healthz/", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include(api)),
    path("", include("catalog.urls")),
    path("fleet/", include("fleet.urls")),
    path("spend/", include("catalog.urls_spend")),
]
