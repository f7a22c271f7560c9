"""URL map: pages, the admin, the API and its schema."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from actions.api import OrphanCleanupPreviewView, OrphanCleanupView
from actions.api_leases import AgentLeaseChangeView, AgentLeaseView
from ckptfleet.health import healthz
from ckptfleet.metrics import metrics
from ckptfleet.middleware import not_found
from ckptfleet.routers import IdDefaultRouter
from dashboard.api import dashboard as dashboard_api
from dashboard.api.audit import AuditEventViewSet
from dashboard.api.fleet import (
    AgentDeletionsView,
    AgentOffloadSignView,
    AgentOffloadsView,
    AgentPromotionsView,
    HostViewSet,
    InventoryDetailView,
    InventoryUploadView,
    InventoryViewSet,
    StorageLocationViewSet,
)
from dashboard.api.lifecycle import RunStatusByNameView, RunStatusView
from dashboard.api.problems import ProblemListView
from dashboard.api.views import CheckpointViewSet, OrphanListView, RunViewSet

router = IdDefaultRouter()
router.register("runs", RunViewSet, basename="run")
router.register("checkpoints", CheckpointViewSet, basename="checkpoint")
router.register("hosts", HostViewSet, basename="host")
router.register("locations", StorageLocationViewSet, basename="location")
router.register("inventory-list", InventoryViewSet, basename="inventory")
router.register("audit", AuditEventViewSet, basename="audit-event")

api = [
    path("inventories/", InventoryUploadView.as_view(), name="inventory-upload"),
    path("inventories/<int:pk>/", InventoryDetailView.as_view(), name="inventory-detail-status"),
    path("agent/deletions/", AgentDeletionsView.as_view(), name="agent-deletions"),
    path("agent/promotions/", AgentPromotionsView.as_view(), name="agent-promotions"),
    path("agent/leases/", AgentLeaseView.as_view(), name="agent-leases"),
    path("agent/leases/<int:pk>/renew/", AgentLeaseChangeView.as_view(change="renew"), name="agent-lease-renew"),
    path("agent/leases/<int:pk>/release/", AgentLeaseChangeView.as_view(change="release"), name="agent-lease-release"),
    path("agent/offloads/", AgentOffloadsView.as_view(), name="agent-offloads"),
    path("agent/offloads/sign/", AgentOffloadSignView.as_view(), name="agent-offloads-sign"),
    path("orphans/", OrphanListView.as_view(), name="orphan-list"),
    path("orphans/cleanup/preview/", OrphanCleanupPreviewView.as_view(), name="orphan-cleanup-preview"),
    path("orphans/cleanup/", OrphanCleanupView.as_view(), name="orphan-cleanup"),
    path("runs/status/", RunStatusByNameView.as_view(), name="run-status-by-name"),
    path("runs/<int:pk>/status/", RunStatusView.as_view(), name="run-status"),
    path("overview/", dashboard_api.OverviewView.as_view(), name="api-overview"),
    path("recovery/<int:pk>/", dashboard_api.RecoveryView.as_view(), name="api-recovery"),
    path("jobs/", dashboard_api.JobListView.as_view(), name="api-jobs"),
    path("problems/", ProblemListView.as_view(), name="api-problems"),
    path("", include("dashboard.api.urls_recovery_point")),  # recovery points and lineage
    path("spend/", include("spend.api_urls")),
    path("teams/", include("spend.api_urls_teams")),
    path("actions/", include("actions.urls_api")),
    path("retention/", include("retention.api_urls")),
    path("approvals/", include("approvals.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves Swagger UI's start-up script as a file (?script), which the CSP allows; the plain view
    # inlines it.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("", include(router.urls)),
]

urlpatterns = [
    path("healthz/", healthz, name="healthz"),
    # Prometheus' conventional path, without a slash.
    path("metrics", metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include(api)),
    path("", include("dashboard.urls_overview")),
    path("", include("dashboard.urls")),
    path("fleet/", include("dashboard.urls_fleet")),
    path("spend/", include("spend.urls")),
    path("recovery/", include("dashboard.urls_recovery")),
    path("jobs/", include("dashboard.urls_jobs")),
    path("problems/", include("dashboard.urls_problems")),
    path("approvals/", include("dashboard.urls_approvals")),
    path("actions/", include("actions.urls")),
    path("audit/", include("dashboard.urls_audit")),
    path("account/tokens/", include("dashboard.urls_tokens")),
    path("retention/", include("retention.urls")),
    path("", include("promotion.urls")),  # /promotions/, /checkpoints/<pk>/promote/ and /api/v1/promotions/
]

# /api/ answers a path that matches nothing (a non-numeric id included) in its JSON shape; pages get 404.html.
handler404 = not_found
