"""A topic's indexed fields (declared on the Topic row in the admin): written to the engine with
the rest of its configuration (sync.py), built in the background when the topic already holds
messages (the operation kind "index_build"), and said on the topic page."""

from .engine import get_queue


def indexes(name: str) -> list[dict]:
    """[{"field", "ready"}] of the topic's indexed fields, in declaration order."""
    return [{"field": i.field, "ready": i.ready} for i in get_queue().indexes(name)]


def write_indexes(q, topic) -> bool:
    """Declare the Topic row's indexed fields in the engine when they differ; True when a field is
    not ready (it must be built)."""
    want = topic.index_fields()
    have = q.indexes(topic.name)
    if [i.field for i in have] != want:
        have = q.set_indexes(topic.name, want)
    return any(not i.ready for i in have)


def build_scope(name: str) -> tuple[dict, int]:
    """The scope of an index build operation and its total (the messages to list)."""
    q = get_queue()
    return {"fields": [i.field for i in q.indexes(name)]}, q.message_count(name)


def index_build_batch(topic: str, scope: dict, run) -> tuple[int, int]:
    """One step of an index build (one HSCAN of a partition's records and one script call);
    ``run.after`` is the build's cursor, None once every field is ready. A message listed with
    only its first MAX_ENTRIES values (a longer list in an indexed field, as a publish would
    refuse) counts as skipped, so the operation page says how many a query may not find by a
    later value."""
    step = get_queue().build_index(topic, run.after)
    run.after = step.cursor
    return step.listed, step.listed - step.capped


def index_words(topic: str, scope: dict) -> str:
    return f"the messages of {topic} listed in its indexed fields ({', '.join(scope.get('fields', []))})"


__all__ = ["build_scope", "index_build_batch", "index_words", "indexes", "write_indexes"]
