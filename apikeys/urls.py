from django.urls import path

from apikeys.api import OAUTH_DISCOVERY_PATHS, KeyUsageReadApi, oauth_not_offered

urlpatterns = [
    path("api/keys/usage", KeyUsageReadApi.as_view(), name="api-key-usage"),
    *(path(discovery, oauth_not_offered) for discovery in OAUTH_DISCOVERY_PATHS),
]
