"""Finding messages: one from anywhere (the header's box, api/find/), the messages of a state
that match a query (a tab's ``?q=``), and their export. Both are bounded scans in the engine; see
queue_core/engine/find.py for what each costs."""

from queue_core import export

from .contracts import DEFAULT_GROUP, MessageState, Query
from .engine import get_queue

EXPORT_FORMATS = export.FORMATS

# A page of search spends at most this much wall time (and each script call ~3 ms of Redis).
SEARCH_BUDGET_S = 2.0
FIND_BUDGET_S = 1.0


def find(text: str, *, limit: int = 20):
    """Where the message named by an id, id prefix or dedup key is, in every topic; or where it
    was last seen (queue_core FindResult)."""
    return get_queue().find(text, limit=limit, budget_s=FIND_BUDGET_S)


def search_page(topic: str, state: MessageState, query: Query, *, after: str | None, confirm,
                since_ms: int | None = None, until_ms: int | None = None, limit: int = 50,
                group: str = DEFAULT_GROUP, partition: int | None = None, newest_first: bool = False):
    """One page of the state's messages matching ``query`` (a SearchPage: messages, next_cursor,
    scanned, total, matched, done); ``confirm(message)`` must hold too (the redacted view)."""
    return get_queue().search(topic, state, query, group=group, partition=partition, after=after, limit=limit,
                              since_ms=since_ms, until_ms=until_ms, reverse=newest_first,
                              budget_s=SEARCH_BUDGET_S, confirm=confirm)


def export_lines(fmt: str, topic: str, state: MessageState, query: Query, *, to_row, group: str = DEFAULT_GROUP,
                 partition: int | None = None, since_ms: int | None = None, until_ms: int | None = None,
                 confirm=None):
    """The export of a state (or a query's matches) as lines of ``fmt`` (jsonl or csv), read a
    page at a time; ``to_row(message)`` makes each row (queue_core.export.row, redacted or not)."""
    rows = (to_row(m) for m in export.messages(get_queue(), topic, state, query, group=group, partition=partition,
                                               since_ms=since_ms, until_ms=until_ms, confirm=confirm))
    return export.lines(fmt, rows)


def export_row(message, **replaced) -> dict:
    return export.row(message, **replaced)
