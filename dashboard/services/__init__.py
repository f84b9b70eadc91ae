"""The dashboard's door to the engine: views, admin actions, commands and tasks reach Redis through
these functions, one module per job.

- engine: the shared DelayQueue per Redis URL
- summaries: counts, throughput and liveness per topic, cached ~1 s
- sync: Django topics -> engine configuration, drift, adoption, pause
- messages: messages, pages of them, error groups, scores, redaction rules, retry previews, and
  what dispatch limits hold back (dispatch_state, held_reason)
- finding: one message from anywhere (find), the messages of a state matching a query (search_page)
- messages: messages, pages of them, error groups, scores, redaction rules, retry previews
- operations: operator actions and bulk batches (compare-and-set)
- publishing: publish now, or after the transaction commits
- bulk: previews of bulk operations and each kind's scope in words (see dashboard.operation_kinds)
- health: the measures alert rules watch
- schedules: schedules for the Schedules page and the API (pages by name), pause/resume/run now/
  delete/edit, and a backfill's preview and batches
- workers: live workers and what they report, and the groups without one (the Workers page)
- indexes: a topic's indexed fields (synced with its configuration), their background build
- batches: one batch's counts per group, callbacks and ETA; the batch of a message
- contracts: the engine's vocabulary (states, errors, name rules) for the rest of the dashboard

Outside this package no dashboard module imports ``queue_core`` or ``redis``.
"""

from . import health
from .batches import UnknownBatch, batch_id, batch_of, batch_times, batch_view, dead_in_batch
from .bulk import matching_preview, replay_preview, replay_scope_words, state_preview
from .engine import get_queue
from .finding import EXPORT_FORMATS, export_lines, export_row, find, search_page
from .indexes import build_scope, indexes
from .messages import (
    HELD_REASONS,
    dispatch_state,
    error_groups,
    error_texts,
    get_message,
    group_config,
    groups,
    held_reason,
    journal,
    message_page,
    next_attempt_preview,
    redaction_rules,
    score_ms,
    topic_config,
    topic_exists,
)
from .operations import (
    act,
    dead_count,
    purge_batch,
    purge_scope,
    replay,
    replay_dead_batch,
    replay_edited,
)
from .publishing import publish
from .schedules import (
    ScheduleNotFound,
    act_on_matching,
    act_on_schedule,
    backfill_preview,
    backfill_scope_holds,
    edit_schedule,
    editable,
    matching_count,
    schedule_page,
    schedule_topic,
    schedules,
)
from .summaries import (
    forget_summary,
    group_summaries,
    lateness_causes,
    minute_series,
    topic_summaries,
    topic_summary,
)
from .sync import (
    Drift,
    UnknownTopic,
    adopt,
    drift,
    set_paused,
    sync_after_commit,
    sync_topic,
    unmanaged_topics,
)
from .workers import LEASE_SLOTS, LIVE_WITHIN_S, live_workers

__all__ = ["HELD_REASONS", "LEASE_SLOTS", "LIVE_WITHIN_S", "Drift", "act", "adopt", "batch_id", "batch_of", "batch_times", "batch_view",
           "dead_in_batch", "UnknownBatch", "build_scope", "indexes", "dead_count", "dispatch_state", "drift",
           "error_groups", "error_texts", "forget_summary", "get_message", "get_queue", "group_config",
           "group_summaries", "groups", "health", "held_reason", "journal", "lateness_causes", "live_workers", "message_page", "minute_series",
           "next_attempt_preview", "publish", "purge_batch", "purge_scope", "ScheduleNotFound", "act_on_matching",
           "act_on_schedule", "backfill_preview", "backfill_scope_holds", "edit_schedule", "editable", "matching_count", "schedule_page", "schedule_topic", "schedules",
           "redaction_rules", "replay", "replay_dead_batch", "replay_edited", "replay_preview", "replay_scope_words",
           "score_ms", "set_paused", "state_preview", "sync_after_commit", "sync_topic", "topic_config",
           "topic_exists", "topic_summaries", "topic_summary", "UnknownTopic", "unmanaged_topics", "EXPORT_FORMATS",
           "export_lines", "export_row", "find", "matching_preview", "search_page"]
