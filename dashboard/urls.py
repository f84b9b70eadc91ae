from django.contrib.auth import views as auth_views
from django.urls import path, re_path, register_converter

from . import (
    actions,
    api,
    export,
    finding,
    matching,
    metrics,
    publish_form,
    tokens,
    views,
    views_analytics,
    views_forecast,
    views_memory,
    views_schedules,
    views_undo,
)
from .views_workers import workers as workers_page


class StateConverter:
    """A message state in a path: lets ``topics/<topic>/<state>/`` (the default group) and
    ``topics/<topic>/<group>/<state>/`` live side by side."""

    regex = "pending|ready|unacked|retrying|dead"

    def to_python(self, value):
        return value

    def to_url(self, value):
        return value


register_converter(StateConverter, "state")

app_name = "delayq"

# Every page and action on messages belongs to one consumer group: topics/<topic>/<group>/...
# The shorter addresses without a group (version 1's) mean the default group and stay valid.
# Fixed words come before <group>, so a group named like one (e.g. "pause") is still reached
# through its tabs (topics/<topic>/pause/ready/).

urlpatterns = [
    # delayq's own login, so that a host project without one still works; DELAYQ_LOGIN_URL names the host's.
    path("login/", auth_views.LoginView.as_view(template_name="delayq/login.html", next_page="delayq:overview"),
         name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="delayq:login"), name="logout"),
    path("", views.overview, name="overview"),
    path("metrics", metrics.metrics, name="metrics"),
    path("operations/", views.operations, name="operations"),
    path("operations/<int:op_id>/", views.operation_detail, name="operation"),
    path("operations/<int:op_id>/cancel/", actions.cancel_operation, name="operation_cancel"),
    path("operations/<int:op_id>/resume/", actions.resume_operation, name="operation_resume"),
    path("operations/<int:op_id>/undo/", views_undo.undo_operation, name="operation_undo"),
    path("workers/", workers_page, name="workers"),
    path("schedules/", views_schedules.schedules, name="schedules"),
    # Two segments act on every schedule the filter matches, three on one schedule: no name is shadowed.
    path("schedules/<str:action>/", views_schedules.schedules_matching, name="schedules_matching"),
    path("schedules/<str:name>/edit/", views_schedules.schedule_edit, name="schedule_edit"),
    path("schedules/<str:name>/backfill/", views_schedules.schedule_backfill, name="schedule_backfill"),
    path("schedules/<str:name>/<str:action>/", views_schedules.schedule_action, name="schedule_action"),
    path("find/", finding.find_page, name="find"),
    path("audit/", views.audit_log, name="audit"),
    path("tokens/", tokens.token_list, name="tokens"),
    path("tokens/<int:token_id>/revoke/", tokens.token_revoke, name="token_revoke"),
    path("audit/<int:entry_id>/reveal/", views.audit_reveal, name="audit_reveal"),
    path("analytics/", views_analytics.analytics_page, name="analytics"),
    path("analytics/run/", views_analytics.analytics_run, name="analytics_run"),
    path("analytics/topics/<str:name>/", views_analytics.analytics_page, name="topic_analytics"),
    path("topics/<str:name>/", views.topic_detail, name="topic"),
    path("topics/<str:name>/adopt/", actions.topic_adopt, name="topic_adopt"),
    path("topics/<str:name>/publish/", publish_form.publish_message, name="publish"),
    path("topics/<str:name>/pause/", actions.topic_pause, name="topic_pause"),
    path("topics/<str:name>/replay-all/", actions.replay_all, name="replay_all"),
    path("topics/<str:name>/forecast/", views_forecast.forecast, name="forecast"),
    path("topics/<str:name>/spread/", views_forecast.spread, name="spread"),
    path("topics/<str:name>/memory/", views_memory.memory, name="memory"),
    path("topics/<str:name>/<state:state>/", views.topic_detail, name="topic_state"),
    path("topics/<str:name>/<state:state>/action/", actions.message_action, name="message_action"),
    path("topics/<str:name>/<state:state>/purge/", actions.purge, name="purge"),
    path("topics/<str:name>/<state:state>/all/<str:action>/", actions.bulk_state, name="bulk_state"),
    path("topics/<str:name>/<state:state>/matching/<str:action>/", matching.act_on_matching, name="matching"),
    path("topics/<str:name>/<state:state>/export/", export.export_state, name="export"),
    path("topics/<str:name>/messages/<str:msg_id>/", views.message_detail, name="message"),
    path("topics/<str:name>/messages/<str:msg_id>/payload/", views.message_payload, name="message_payload"),
    path("topics/<str:name>/messages/<str:msg_id>/reveal/", views.reveal_message, name="message_reveal"),
    path("topics/<str:name>/messages/<str:msg_id>/edit/", actions.edit_and_replay, name="message_edit"),
    # A group's page without a state opens on its first tab with a problem in it (views.opening_state).
    path("topics/<str:name>/batch/<str:batch_id>/", views.batch_detail, name="batch"),
    path("topics/<str:name>/<str:group>/", views.topic_detail, name="topic"),
    path("topics/<str:name>/<str:group>/pause/", actions.topic_pause, name="topic_pause"),
    path("topics/<str:name>/<str:group>/replay-all/", actions.replay_all, name="replay_all"),
    path("topics/<str:name>/<str:group>/forecast/", views_forecast.forecast, name="forecast"),
    path("topics/<str:name>/<str:group>/spread/", views_forecast.spread, name="spread"),
    path("topics/<str:name>/<str:group>/<state:state>/", views.topic_detail, name="topic_state"),
    path("topics/<str:name>/<str:group>/<state:state>/action/", actions.message_action, name="message_action"),
    path("topics/<str:name>/<str:group>/<state:state>/purge/", actions.purge, name="purge"),
    path("topics/<str:name>/<str:group>/<state:state>/all/<str:action>/", actions.bulk_state, name="bulk_state"),
    path("topics/<str:name>/<str:group>/<state:state>/matching/<str:action>/", matching.act_on_matching,
         name="matching"),
    path("topics/<str:name>/<str:group>/<state:state>/export/", export.export_state, name="export"),
    path("topics/<str:name>/<str:group>/messages/<str:msg_id>/", views.message_detail, name="message"),
    path("topics/<str:name>/<str:group>/messages/<str:msg_id>/payload/", views.message_payload,
         name="message_payload"),
    path("topics/<str:name>/<str:group>/messages/<str:msg_id>/reveal/", views.reveal_message,
         name="message_reveal"),
    path("topics/<str:name>/<str:group>/messages/<str:msg_id>/edit/", actions.edit_and_replay,
         name="message_edit"),
    path("api/schema/", api.schema, name="api_schema"),
    path("api/topics/", api.topics, name="api_topics"),
    path("api/workers/", api.workers, name="api_workers"),
    path("api/schedules/", api.schedules, name="api_schedules"),
    path("api/find/", api.find, name="api_find"),
    path("api/topics/<str:name>/replay/", api.replay, name="api_replay"),
    path("api/topics/<str:name>/messages/", api.publish, name="api_publish"),
    path("api/topics/<str:name>/messages/<str:msg_id>/", api.message_payload, name="api_message"),
    path("api/topics/<str:name>/batch/<str:batch_id>/", api.batch, name="api_batch"),
    path("api/topics/<str:name>/<str:state>/", api.messages_list, name="api_messages"),
    path("api/topics/<str:name>/<str:group>/replay/", api.replay, name="api_replay"),
    path("api/topics/<str:name>/<str:group>/messages/<str:msg_id>/", api.message_payload, name="api_message"),
    path("api/topics/<str:name>/<str:group>/<str:state>/", api.messages_list, name="api_messages"),
    # [\s\S], not ".": a path with an encoded newline (%0A) is still under api/ (a JSON 404).
    re_path(r"^api/(?P<rest>[\s\S]*)$", api.not_found),
]
