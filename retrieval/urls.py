from django.urls import path

from retrieval import views

urlpatterns = [
    path("api/v1/retrieval", views.RetrievalApi.as_view(), name="retrieval-api"),
    path("ragflow/api/v1/retrieval", views.ragflow_retrieval, name="ragflow-retrieval"),
    path("dify/retrieval", views.dify_retrieval, name="dify-retrieval"),
]
