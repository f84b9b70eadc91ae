from django.urls import path

from . import views

app_name = "dashboard"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("topics/<str:name>/", views.topic_detail, name="topic"),
    path("topics/<str:name>/pause/", views.topic_pause, name="topic_pause"),
    path("topics/<str:name>/adopt/", views.topic_adopt, name="topic_adopt"),
]
