from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path, re_path

from compaction.metrics import metrics_view
from console import (
    alert_views,
    audit_views,
    cache_views,
    call_views,
    docs_views,
    list_exports,
    overview_views,
    tag_views,
    views,
)
from console.api import api
from console.limits import ThrottledAdminAuthenticationForm, ThrottledAuthenticationForm
from console.replica import reads_from_replica
from telemetry.otlp.views import export as otlp_export

# Sign-in throttling for the admin too (console.limits).
admin.site.login_form = ThrottledAdminAuthenticationForm

# The read-only pages may read from a replica (`DATABASE_REPLICA_URL`, `console.replica`).
urlpatterns = [
    path("admin/", admin.site.urls),
    # OTLP/HTTP: OTEL_EXPORTER_OTLP_ENDPOINT=http://HOST/api/v1/otlp appends /v1/<signal>
    re_path(r"^api/v1/otlp/v1/(?P<signal>traces|logs|metrics)$", otlp_export, name="otlp"),
    path("api/", api.urls),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    # the operator console
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(
            redirect_authenticated_user=True, authentication_form=ThrottledAuthenticationForm
        ),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", reads_from_replica(overview_views.overview), name="overview"),
    path("overview/live", reads_from_replica(overview_views.overview_live), name="overview_live"),
    path("sessions/", reads_from_replica(views.sessions_list), name="sessions"),
    # each table's download: its page's path + export.csv or export.jsonl (console.list_exports)
    path("overview/export.<str:fmt>", list_exports.spend_export, name="spend_export"),
    path("sessions/export.<str:fmt>", list_exports.sessions_export, name="sessions_export"),
    path(
        "sessions/<int:pk>/cache/export.<str:fmt>",
        list_exports.session_misses_export,
        name="session_misses_export",
    ),
    path(
        "sessions/<int:pk>/runs/export.<str:fmt>",
        list_exports.session_runs_export,
        name="session_runs_export",
    ),
    path("cache/export.<str:fmt>", list_exports.fleet_cache_export, name="cache_export"),
    path("archives/export.<str:fmt>", list_exports.archives_export, name="archives_export"),
    path("catalogue/export.<str:fmt>", list_exports.catalogue_export, name="catalogue_export"),
    path("keys/export.<str:fmt>", list_exports.keys_export, name="keys_export"),
    path("sessions/tag", tag_views.sessions_tag_bulk, name="sessions_tag_bulk"),
    path("sessions/views/", tag_views.saved_view_save, name="saved_view_save"),
    path(
        "sessions/views/<str:view_id>/rename", tag_views.saved_view_rename, name="saved_view_rename"
    ),
    path(
        "sessions/views/<str:view_id>/delete", tag_views.saved_view_delete, name="saved_view_delete"
    ),
    path("sessions/<int:pk>/", views.session_page, name="session"),
    path("sessions/<int:pk>/tags", tag_views.session_tags_add, name="session_tags"),
    path("sessions/<int:pk>/tags/remove", tag_views.session_tag_remove, name="session_tag_remove"),
    path("sessions/<int:pk>/live", views.session_live, name="session_live"),
    path("sessions/<int:pk>/compact", views.session_compact, name="session_compact"),
    path("sessions/<int:pk>/calls/<int:call_pk>/", call_views.call_page, name="call"),
    path("sessions/<int:pk>/cache", cache_views.session_cache, name="session_cache"),
    path("sessions/<int:pk>/plan", cache_views.session_plan, name="session_plan"),
    path("cache/", reads_from_replica(cache_views.fleet_cache_page), name="cache"),
    path("cache/ttl", cache_views.ttl_advisor, name="ttl_advisor"),
    path("cache/summary", reads_from_replica(cache_views.cache_summary), name="cache_summary"),
    path("archives/", reads_from_replica(views.archives), name="archives"),
    path("archives/<int:pk>/", views.archive_detail, name="archive"),
    path("archives/<int:pk>/messages/<int:seq>/", views.archive_message, name="archive_message"),
    path(
        "archives/<int:pk>/download.<str:fmt>",
        views.archive_download,
        name="archive_download",
    ),
    path("policy/", views.policy_overview, name="policy"),
    path("policy/global/", views.policy_edit, name="policy_global"),
    path("policy/global/preview", views.policy_preview, name="policy_global_preview"),
    path("policy/profiles/new", views.profile_create, name="profile_create"),
    path("policy/profiles/<str:name>/", views.policy_edit, name="policy_profile"),
    path("policy/profiles/<str:name>/preview", views.policy_preview, name="policy_profile_preview"),
    path("policy/profiles/<str:name>/windows", views.profile_windows, name="profile_windows"),
    path("catalogue/", views.catalogue_list, name="catalogue"),
    path("catalogue/new/", views.catalogue_edit, name="catalogue_new"),
    path("catalogue/<int:pk>/", views.catalogue_edit, name="catalogue_edit"),
    path("keys/", views.keys, name="keys"),
    path("alerts/", alert_views.alerts_page, name="alerts"),
    path("alerts/rules/<int:pk>/", alert_views.alert_rule_edit, name="alert_rule_edit"),
    path("alerts/rules/<int:pk>/delete", alert_views.alert_rule_delete, name="alert_rule_delete"),
    path("keys/<int:pk>/revoke", views.key_revoke, name="key_revoke"),
    path("audit/", audit_views.audit, name="audit"),
    # the documentation site, when `make docs` has built it (console.docs_views)
    path("docs/", docs_views.docs, name="docs"),
    path("docs/<path:path>", docs_views.docs, name="docs_page"),
]

# A database outage outside a view answers 503 too (console.middleware.server_error).
handler500 = "console.middleware.server_error"
