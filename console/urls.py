from django.contrib import admin
from django.urls import path

from console import views
from console.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("healthz", views.healthz, name="healthz"),
]
