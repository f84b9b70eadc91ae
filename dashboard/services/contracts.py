"""What the rest of the dashboard may know of the engine: its vocabulary (states, errors, name
rules, retry policies) re-exported here, so that no module outside ``services`` imports
``queue_core`` or ``redis`` (tests/dashboard/test_structure.py holds that line)."""

from redis import RedisError as Unavailable  # Redis down or failing: pages say 503
from redis.exceptions import (
    RedisClusterException as ClusterRefused,  # not a RedisError: a cluster client's refusal
)

from queue_core import (
    GroupConfig,
    InvalidArgument,
    InvalidTopic,
    MessageState,
    NotReplicated,
    PayloadTooLarge,
    QueueError,
    StateConflict,
    TopicConfig,
    TopicFull,
)
from queue_core import RetryPolicy as EngineRetryPolicy
from queue_core.config import FAIRNESS_KEY_MAX_BYTES, ROUND_ROBIN, check_fairness_key
from queue_core.connect import parse as parse_redis_url
from queue_core.connect import tls_options
from queue_core.engine.dedup import DEDUP_MODES
from queue_core.engine.dedup import OUTCOMES as PUBLISH_OUTCOMES
from queue_core.engine.read import position_cursor
from queue_core.indexes import MAX_ENTRIES as MAX_INDEX_ENTRIES
from queue_core.indexes import MAX_INDEXES
from queue_core.indexes import check_fields as check_index_fields
from queue_core.keys import (
    BRIDGE_TOPIC_PREFIX,
    DEFAULT_GROUP,
    GROUP_RULE,
    LATENESS_BOUNDS_MS,
    LATENESS_CAUSES,
    MAX_PARTITIONS,
    MAX_PRIORITY,
    TOPIC_RULE,
    is_bridge_topic,
    validate_group,
    validate_topic,
)
from queue_core.query import EXAMPLE as QUERY_EXAMPLE
from queue_core.query import FIELDS as QUERY_FIELDS
from queue_core.query import Query, QueryError, Term, message_fields
from queue_core.query import parse as parse_query
from queue_core.retry import format_seconds, policy_problems

__all__ = ["BRIDGE_TOPIC_PREFIX", "DEDUP_MODES", "DEFAULT_GROUP", "EngineRetryPolicy", "FAIRNESS_KEY_MAX_BYTES", "GROUP_RULE",
           "GroupConfig", "InvalidArgument", "InvalidTopic", "LATENESS_BOUNDS_MS", "LATENESS_CAUSES", "MAX_PARTITIONS", "MAX_PRIORITY",
           "ROUND_ROBIN", "MessageState", "NotReplicated", "PayloadTooLarge", "QueueError", "StateConflict",
           "TOPIC_RULE", "TopicConfig", "TopicFull", "check_fairness_key", "Unavailable", "ClusterRefused", "format_seconds", "is_bridge_topic",
           "policy_problems", "QUERY_EXAMPLE", "QUERY_FIELDS", "Query", "QueryError", "Term", "message_fields",
           "MAX_INDEX_ENTRIES", "MAX_INDEXES", "check_index_fields",
           "parse_query", "PUBLISH_OUTCOMES",
           "parse_redis_url", "position_cursor", "tls_options", "validate_group", "validate_topic"]
