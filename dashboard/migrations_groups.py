"""The ready-made groups and their permissions (used by migration 0002 and by the tests)."""

GROUPS = {
    "Viewer": ["view_queue"],
    "Operator": ["view_queue", "replay_message", "delete_message", "run_analytics"],
    "Admin": ["view_queue", "view_payload", "replay_message", "delete_message", "purge_topic", "manage_topics",
              "run_analytics", "view_auditentry", "view_replayoperation"],
}
