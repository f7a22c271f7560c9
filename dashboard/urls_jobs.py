from django.urls import path

from dashboard import views_jobs

app_name = "jobs"
urlpatterns = [
    path("", views_jobs.job_list, name="list"),
    path("progress.json", views_jobs.job_progress, name="progress"),
    path("run-due/", views_jobs.run_due_now, name="run-due"),
]
