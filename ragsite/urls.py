from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema", SpectacularAPIView.as_view(), name="api-schema"),
    path("", include("assistant.urls")),
    path("", include("rag.urls")),
    path("", include("apikeys.urls")),
    path("", include("cgrag.urls")),
    path("", include("retrieval.urls")),
    path("ops/login/", auth_views.LoginView.as_view(
        template_name="ops/login.html",
        extra_context={"ops_group": settings.RAG_OPS_GROUP, "qa_group": settings.RAG_QA_GROUP}), name="ops-login"),
    path("ops/logout/", auth_views.LogoutView.as_view(next_page="ops-login"), name="ops-logout"),
    path("ops/eval/", include("evaluation.urls")),
    path("ops/", include("opsboard.urls")),  # the eval center lives on the ops site
]
