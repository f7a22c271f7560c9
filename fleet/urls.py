from django.urls import path

from fleet import views

app_name = "fleet"
urlpatterns = [
    path("", views.fleet_overview, name="overview"),
    path("inventories/<int:pk>/", views.inventory_detail, name="inventory-detail"),
]
