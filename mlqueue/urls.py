from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.staticfiles.views import serve as serve_static
from django.http import JsonResponse
from django.urls import include, path, re_path
from django.views.defaults import bad_request, page_not_found, server_error
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from agents import api as agents_api
from agents import node_api
from agents import pages as node_pages
from mlqueue.errors import SERVER_ERROR
from mlqueue.middleware import API_PREFIX, api_not_found
from notifications import api as notifications_api
from notifications import page as notifications_page
from scheduling.metrics import metrics_view
from scheduling.web import api as jobs_api
from scheduling.web import (
    fair_share_api,
    forecast_accuracy_api,
    maintenance_api,
    reports_page,
    schedules_api,
    schedules_page,
    submit_page,
    tokens_page,
    usage_api,
    whatif_api,
    whatif_page,
)
from scheduling.web import pages as job_pages
from scheduling.web import teams_page as team_pages
from teams import api as teams_api
from teams import login_limits

admin.site.login_form = login_limits.LimitedAdminAuthenticationForm

BAD_REQUEST = "bad request: refused before it reached the API (see the server's log)"


def endpoint(route: str, view, name: str):
    """The API's endpoints are written without a trailing slash (README, "The API"); accept either."""
    return re_path(rf"^{route}/?$", view, name=name)


api_v1 = [
    endpoint("jobs", jobs_api.JobListCreate.as_view(), "jobs"),
    endpoint("jobs/dry-run", jobs_api.JobDryRun.as_view(), "job-dry-run"),
    endpoint("jobs/cancel", jobs_api.JobBulkCancel.as_view(), "jobs-cancel"),
    endpoint("jobs/batch", jobs_api.JobBatchSubmit.as_view(), "jobs-batch"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)/why", jobs_api.JobWhy.as_view(), "job-why"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)", jobs_api.JobDetail.as_view(), "job-detail"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)/events", jobs_api.JobEvents.as_view(), "job-events"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)/children", jobs_api.JobChildren.as_view(), "job-children"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)/metrics", jobs_api.JobMetrics.as_view(), "job-metrics"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)/cancel", jobs_api.JobCancel.as_view(), "job-cancel"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)/hold", jobs_api.JobHold.as_view(), "job-hold"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)/release", jobs_api.JobRelease.as_view(), "job-release"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)/requeue", jobs_api.JobRequeue.as_view(), "job-requeue"),
    endpoint("schedules", schedules_api.ScheduleListCreate.as_view(), "schedules"),
    endpoint(r"schedules/(?P<schedule_id>[0-9]+)", schedules_api.ScheduleDetail.as_view(), "schedule-detail"),
    endpoint(r"schedules/(?P<schedule_id>[0-9]+)/run", schedules_api.ScheduleRun.as_view(), "schedule-run"),
    endpoint(r"schedules/(?P<schedule_id>[0-9]+)/events", schedules_api.ScheduleEvents.as_view(), "schedule-events"),
    endpoint("usage", usage_api.Usage.as_view(), "usage"),
    endpoint("prices", usage_api.PriceList.as_view(), "prices"),
    endpoint(r"prices/(?P<price_id>[0-9]+)", usage_api.PriceDetail.as_view(), "price-detail"),
    endpoint("teams", teams_api.TeamList.as_view(), "teams"),
    endpoint(r"teams/(?P<name>[a-z0-9-]+)/quotas", teams_api.TeamQuotas.as_view(), "team-quotas"),
    endpoint(r"teams/(?P<name>[a-z0-9-]+)/events", teams_api.TeamEvents.as_view(), "team-events"),
    endpoint("fair-share", fair_share_api.FairShare.as_view(), "fair-share"),
    endpoint("forecast-accuracy", forecast_accuracy_api.ForecastAccuracy.as_view(), "forecast-accuracy"),
    endpoint("what-if", whatif_api.QuotaPreviewCreate.as_view(), "what-if"),
    endpoint(r"what-if/(?P<preview_id>[0-9]+)", whatif_api.QuotaPreviewDetail.as_view(), "what-if-detail"),
    endpoint("tokens", teams_api.TokenListCreate.as_view(), "tokens"),
    endpoint(r"tokens/(?P<token_id>[0-9]+)", teams_api.TokenDetail.as_view(), "token-detail"),
    endpoint("notifications/settings", notifications_api.NotificationSettingsView.as_view(), "notification-settings"),
    endpoint("notifications/settings/rotate-secret", notifications_api.RotateSecret.as_view(), "notification-secret"),
    endpoint("notifications/deliveries", notifications_api.DeliveryList.as_view(), "notification-deliveries"),
    endpoint("nodes", agents_api.NodeList.as_view(), "nodes"),
    endpoint("nodes/bulk", agents_api.NodeBulkAction.as_view(), "nodes-bulk"),
    endpoint("maintenance", maintenance_api.WindowList.as_view(), "maintenance"),
    endpoint(r"maintenance/(?P<window_id>[0-9]+)", maintenance_api.WindowDetail.as_view(), "maintenance-detail"),
    endpoint(r"maintenance/(?P<window_id>[0-9]+)/events", maintenance_api.WindowEvents.as_view(), "maintenance-events"),
    endpoint("scheduler", jobs_api.SchedulerState.as_view(), "scheduler"),
    endpoint("queue", jobs_api.Queue.as_view(), "queue-api"),
    endpoint(r"jobs/(?P<job_id>[0-9]+)/logs", jobs_api.JobLogs.as_view(), "job-logs"),
    endpoint(r"nodes/(?P<name>[^/]+)/cordon", agents_api.NodeAction.as_view(action="cordon"), "node-cordon"),
    endpoint(r"nodes/(?P<name>[^/]+)/drain", agents_api.NodeAction.as_view(action="drain"), "node-drain"),
    endpoint(r"nodes/(?P<name>[^/]+)/uncordon", agents_api.NodeAction.as_view(action="uncordon"), "node-uncordon"),
    endpoint(
        r"nodes/(?P<name>[^/]+)/reset-token", agents_api.NodeAction.as_view(action="reset-token"), "node-reset-token"
    ),
    endpoint(r"nodes/(?P<name>[^/]+)/reclaim-notice", agents_api.ReclaimNotice.as_view(), "node-reclaim-notice"),
    endpoint(r"nodes/(?P<name>[^/]+)/include-gpus", agents_api.IncludeGpus.as_view(), "node-include-gpus"),
    endpoint(r"nodes/(?P<name>[^/]+)/events", node_api.NodeEvents.as_view(), "node-events"),
    endpoint(r"nodes/(?P<name>[^/]+)", node_api.NodeDetail.as_view(), "node-detail"),
    endpoint("agents/register", agents_api.AgentRegister.as_view(), "agent-register"),
    endpoint(r"agents/(?P<name>[^/]+)/heartbeat", agents_api.AgentHeartbeat.as_view(), "agent-heartbeat"),
    endpoint(r"agents/(?P<name>[^/]+)/events", agents_api.AgentEvents.as_view(), "agent-events"),
]

pages = [
    path("", job_pages.queue, name="home"),
    path("queue/", job_pages.queue, name="queue"),
    path("queue/groups/<int:job_id>/", job_pages.queue_group, name="queue-group"),
    path("jobs/new/", submit_page.page, name="job-new"),
    path("jobs/<int:job_id>/", job_pages.job_page, name="job-page"),
    path("jobs/<int:job_id>/panel/", job_pages.job_panel, name="job-panel"),
    path("jobs/<int:job_id>/help/", job_pages.job_help, name="job-help"),
    path("jobs/<int:job_id>/group/", job_pages.job_group, name="job-group"),
    path("jobs/<int:job_id>/log/", job_pages.job_log, name="job-log"),
    path("jobs/<int:job_id>/cancel/", job_pages.job_cancel, name="job-cancel-page"),
    *[
        path(f"jobs/<int:job_id>/{verb}/", job_pages.job_control_page, {"verb": verb}, name=f"job-{verb}-page")
        for verb in ("hold", "release", "requeue")
    ],
    path("jobs/<int:job_id>/clone/", job_pages.job_clone, name="job-clone"),
    path("schedules/", schedules_page.page, name="schedules-page"),
    path("schedules/<int:schedule_id>/", schedules_page.detail, name="schedule-page"),
    re_path(
        r"^schedules/(?P<schedule_id>[0-9]+)/(?P<verb>suspend|resume|run)/$",
        schedules_page.action,
        name="schedule-action",
    ),
    path("teams/", team_pages.page, name="teams-page"),
    path("reports/", reports_page.page, name="reports-page"),
    path("teams/what-if/", whatif_page.start, name="what-if-start"),
    path("teams/what-if/<int:preview_id>/", whatif_page.result, name="what-if-result"),
    path("nodes/", node_pages.page, name="nodes-page"),
    path("nodes/<str:name>/", node_pages.node_page, name="node-page"),
    path("account/tokens/", tokens_page.page, name="account-tokens"),
    path("account/notifications/", notifications_page.page, name="account-notifications"),
    # Both password forms count failures and refuse (429) a locked user name or address.
    path(
        "accounts/login/",
        login_limits.with_lockout_status(
            auth_views.LoginView.as_view(authentication_form=login_limits.LimitedAuthenticationForm)
        ),
        name="login",
    ),
    path("admin/login/", login_limits.with_lockout_status(admin.site.login)),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
]

urlpatterns = [
    *pages,
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
]

if settings.MLQ_SERVE_STATIC:
    urlpatterns.append(re_path(r"^static/(?P<path>.*)$", serve_static, {"insecure": True}))


def not_found(request, exception=None):
    """An API path that matches no route (`/api/v1/jobs/abc/cancel`) answers as the API does,
    in JSON; any other path gets Django's page. (With DEBUG on, mlqueue.middleware.ApiNotFound.)"""
    if request.path.startswith(API_PREFIX):
        return api_not_found(request.path)
    return page_not_found(request, exception)


def refused(request, exception=None):
    """A request Django refuses before any view (a Host not in ALLOWED_HOSTS, say): JSON under
    /api/, Django's page elsewhere."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": BAD_REQUEST}, status=400)
    return bad_request(request, exception)


def failed(request):
    """An unhandled error (DRF answers only the exceptions it knows): JSON under /api/, so a
    client reads the error as it reads every other; the traceback goes to the log."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse({"detail": SERVER_ERROR}, status=500)
    return server_error(request)


handler400 = refused
handler404 = not_found
handler500 = failed
