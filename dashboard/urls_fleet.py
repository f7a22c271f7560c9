from django.urls import path

from dashboard import views_fleet as views

app_name = "fleet"
urlpatterns = [
    path("", views.fleet_overview, name="overview"),
    path("hosts/<int:pk>/", views.host_detail, name="host-detail"),
    path("hosts/<int:pk>/state/", views.host_state, name="host-state"),
    path("locations/<int:pk>/", views.location_detail, name="location-detail"),
    path("locations/<int:pk>/scan/", views.location_scan, name="location-scan"),
    path("inventories/<int:pk>/", views.inventory_detail, name="inventory-detail"),
]
