"""Pages of the audit trail, under /audit/."""

from django.urls import path

from dashboard import views_audit

app_name = "audit"
urlpatterns = [
    path("", views_audit.audit_trail, name="trail"),
    path("export.csv", views_audit.audit_export, name="export"),
    path("verify/", views_audit.audit_verify_now, name="verify"),
]
