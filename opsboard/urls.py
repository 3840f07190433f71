from django.urls import path, re_path

from opsboard import views

app_name = "opsboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("eval-traffic", views.eval_traffic, name="eval_traffic"),
    path("requests", views.request_list, name="requests"),
    path("requests/<str:request_id>", views.request_detail, name="request"),
    path("requests/<str:request_id>/replay", views.request_replay, name="replay"),
    path("live", views.live_page, name="live"),
    path("live.json", views.live_json, name="live_json"),
    path("reports", views.report_list, name="reports"),
    re_path(r"^reports/(?P<day>\d{4}-\d{2}-\d{2})\.(?P<fmt>html|json)$", views.report_download, name="report"),
    path("freshness", views.freshness_page, name="freshness"),
    path("gaps", views.gaps_page, name="gaps"),
    path("gaps.json", views.gaps_json, name="gaps_json"),
    path("gaps/<int:group_id>", views.gap_page, name="gap"),
    path("gaps/<int:group_id>/drafts", views.gap_drafts, name="gap_drafts"),
    path("gaps/<int:group_id>/covered", views.gap_covered, name="gap_covered"),
]
