"""The dashboard's door to the engine: views, admin actions, commands and tasks reach Redis through
these functions, one module per job.

- engine: the shared DelayQueue per Redis URL
- summaries: counts, throughput and liveness per topic, cached ~1 s
- sync: Django topics -> engine configuration, drift, adoption, pause
- messages: pages of messages, scores, redaction rules, retry previews
- bulk: previews of "replay all matching"
"""

from .bulk import replay_preview, replay_scope_words
from .engine import get_queue
from .messages import message_page, next_attempt_preview, redaction_rules, score_ms
from .summaries import forget_summary, topic_summaries, topic_summary
from .sync import Drift, adopt, drift, set_paused, sync_after_commit, sync_topic, unmanaged_topics

__all__ = ["Drift", "adopt", "drift", "forget_summary", "get_queue", "message_page", "next_attempt_preview",
           "redaction_rules", "replay_preview", "replay_scope_words", "score_ms", "set_paused",
           "sync_after_commit", "sync_topic", "topic_summaries", "topic_summary", "unmanaged_topics"]
