from django.urls import path

from dashboard import views_problems

app_name = "problems"
urlpatterns = [
    path("", views_problems.problem_list, name="list"),
    path("export.csv", views_problems.problem_export, name="export"),
]
