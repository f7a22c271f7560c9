"""API routes of spend, under /api/v1/spend/: the summary, each table by name, and the price points."""

from django.urls import path

from spend.api import PricePointListView, SpendSummaryView, SpendTableView

app_name = "spend-api"
urlpatterns = [
    path("", SpendSummaryView.as_view(), name="summary"),
    path("price-points/", PricePointListView.as_view(), name="price-points"),
    path("<slug:name>/", SpendTableView.as_view(), name="table"),
]
