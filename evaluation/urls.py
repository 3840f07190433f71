from django.urls import path

from evaluation import views

app_name = "evaluation"

urlpatterns = [
    path("", views.run_list, name="center"),
    path("runs", views.run_launch, name="launch"),
    path("runs/<int:run_id>", views.run_detail, name="run"),
    path("runs/<int:run_id>/progress", views.run_progress, name="progress"),
    path("runs/<int:run_id>/cancel", views.run_cancel, name="cancel"),
    path("runs/<int:run_id>/retry", views.run_retry, name="retry"),
    path("runs/<int:run_id>/report", views.run_report, name="report"),
    path("compare", views.run_compare, name="compare"),
    path("gated-reindex", views.gated_reindex, name="gated_reindex"),
]
