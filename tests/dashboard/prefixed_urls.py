from django.urls import include, path

urlpatterns = [path("ops/queue/", include("dashboard.urls"))]
