from django.urls import path

from rag import views

urlpatterns = [
    path("search", views.home, name="search"),
    path("readyz", views.readyz, name="readyz"),
]
