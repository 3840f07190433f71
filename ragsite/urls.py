from django.contrib import admin
from django.urls import include, path

from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("", include("assistant.urls")),
    path("", include("rag.urls")),
    path("", include("apikeys.urls")),
    path("ops/eval/", include("evaluation.urls")),  # the eval center lives on the ops site
]
