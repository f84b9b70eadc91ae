"""Export one state of one group (or the messages of it a query matches) as JSON Lines or CSV,
streamed: messages are read a page at a time (``page`` or a bounded ``search``) and written as they
come, so memory stays flat whatever the size. ``delayq export`` and the dashboard's export both
write through here; the dashboard passes a ``view`` that redacts each message first.

One row per message, the same columns in both formats (COLUMNS). The payload is its text (UTF-8,
undecodable bytes replaced); headers are a JSON object's text in CSV."""

import csv
import io
import json
from collections.abc import Iterable, Iterator

from .keys import DEFAULT_GROUP
from .query import Query, parse
from .states import MessageState

COLUMNS = ("id", "topic", "group", "partition", "state", "score_ms", "created_ms", "key", "order_key", "attempts",
           "error_type", "error_message", "fingerprint", "headers", "payload")
FORMATS = ("jsonl", "csv")
PAGE = 500


def messages(q, topic: str, state: MessageState | str, query: Query | str | None = None, *,
             group: str = DEFAULT_GROUP, partition: int | None = None, since_ms: int | None = None,
             until_ms: int | None = None, confirm=None) -> Iterator:
    """Every message of the state (or every match of ``query``; within the scores [since_ms,
    until_ms]; those ``confirm`` accepts), page by page to the end."""
    state = MessageState(state)
    query = parse(query) if isinstance(query, str) else (query or Query())
    if not query.terms and (since_ms is not None or until_ms is not None or confirm is not None):
        query = EVERY   # a time range and a confirm are the search's (a plain page has neither)
    after = None
    while True:
        if query.terms:
            page = q.search(topic, state, query, group=group, partition=partition, after=after, limit=PAGE,
                            since_ms=since_ms, until_ms=until_ms, confirm=confirm)
        else:
            page = q.page(topic, state, limit=PAGE, after=after, group=group, partition=partition)
        yield from page.messages
        after = page.next_cursor
        if after is None:
            return


# A query every message matches (attempts are never negative): a search of the whole state.
EVERY = parse("attempts>=0")


def row(message, *, payload: str | None = None, headers: dict | None = None, error: str | None = None) -> dict:
    """A message as one export row; ``payload``/``headers``/``error`` (the error's message) replace
    the message's own (the dashboard passes redacted ones)."""
    err = message.last_error
    corrupt = bool(message.corrupt)
    return {
        "id": message.id, "topic": message.topic, "group": message.group, "partition": message.partition,
        "state": message.state.value if message.state else None,
        "score_ms": int(message.score) if message.score is not None else None,
        "created_ms": int(message.created_at.timestamp() * 1000) if not corrupt and message.created_at else None,
        "key": None if corrupt else message.key, "order_key": None if corrupt else message.order_key,
        "attempts": message.attempts, "error_type": err.type if err else None,
        "error_message": (err.message if error is None else error) if err else None,
        "fingerprint": err.fingerprint if err else None,
        "headers": (None if corrupt else message.headers) if headers is None else headers,
        "payload": message.payload.decode("utf-8", "replace") if payload is None else payload,
    }


def jsonl(rows: Iterable[dict]) -> Iterator[str]:
    for r in rows:
        yield json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n"


def csv_lines(rows: Iterable[dict]) -> Iterator[str]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({**r, "headers": json.dumps(r["headers"], ensure_ascii=False) if r["headers"] else ""})
        yield buf.getvalue()
        buf.seek(0)
        buf.truncate()
    if buf.tell():
        yield buf.getvalue()


def lines(fmt: str, rows: Iterable[dict]) -> Iterator[str]:
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r}: one of {', '.join(FORMATS)}")
    return jsonl(rows) if fmt == "jsonl" else csv_lines(rows)

