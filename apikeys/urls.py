from django.urls import path

from apikeys.api import UsageApi

urlpatterns = [
    path("api/keys/usage", UsageApi.as_view(), name="api-key-usage"),
]
