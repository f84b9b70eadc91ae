from django.urls import include, path

urlpatterns = [path("ops/queue/", include("dashboard.urls")), path("accounts/", include("django.contrib.auth.urls"))]
