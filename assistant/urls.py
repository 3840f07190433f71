from django.urls import path

from assistant import api, views

urlpatterns = [
    path("", views.chat, name="chat"),
    path("api/search", api.QuestionSearchApi.as_view(), name="api-search"),
    path("api/chat", api.QuestionAnswerApi.as_view(), name="api-chat"),
    path("api/feedback", api.FeedbackCreateApi.as_view(), name="api-feedback"),
]
