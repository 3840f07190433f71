from django.urls import path, re_path

from retrieval import views

urlpatterns = [
    path("api/v1/retrieval", views.ChunkRetrieveApi.as_view(), name="retrieval-api"),
    path("ragflow/api/v1/retrieval", views.ragflow_retrieval, name="ragflow-retrieval"),
    path("ragflow/api/v1/datasets", views.ragflow_datasets, name="ragflow-datasets"),
    path("ragflow/api/v1/datasets/<str:dataset_id>/documents", views.ragflow_documents, name="ragflow-documents"),
    re_path(r"^ragflow(?:/(?P<rest>.*))?$", views.ragflow_not_found, name="ragflow-not-found"),
    path("dify/retrieval", views.dify_retrieval, name="dify-retrieval"),
]
