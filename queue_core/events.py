"""The event stream's format, and the one function that reads it back per message.

Each partition of a topic has one stream. A script call writes one entry per (event kind, group)
it caused, with the ids batched: writing one entry per message cost more Redis CPU than the rest
of a claim. An entry's fields:

    e       event kind: published, claimed, acked, nacked, rejected, expired (lease), ttl_expired,
            dead, replayed, delivered_now, cancelled, deleted, evicted, debounced (a publish gave
            the key's message its payload and due time), released (a message published with
            after= became due at its parent's ack: ``from`` is the parent), callback_failed (a batch's
            callback its topic refused for good: ``ids`` is the batch, ``reason`` "<kind>: <why>",
            engine/batch.py), restored (undo put a held message back: ``from`` is 'held', or
            'dead' for a kill undone; engine/undo.py)
    g       the group ('' for published: every group of the layout received it)
    ts      Redis time (ms)          n    number of messages
    ids     comma-separated ids      actor
    att, due, hms, fp, next, from,   per-message columns (comma lists aligned with ids), or one
    ac, cause                        value for all; ac (acked) is "attempt|claim ms", from which
                                     explode derives attempt and handler_ms; cause (claimed, only
                                     when a message of the call was late) is why, as
                                     lua/includes/lateness.lua decides it ("key_held:<holder>")
    reason, meta, payload            evicted only (one message per entry)

``explode`` turns an entry into the per-message rows the archive and the analytics read: the
version 1 field names (event, msg, ts, attempt, due, lateness_ms, handler_ms, fp, next, actor,
from, reason, meta, payload) plus group, partition, and for late claims lateness_cause (one of
keys.LATENESS_CAUSES) and late_behind (key_held's holder).
"""

from collections.abc import Iterable

COLUMNS = {"att": "attempt", "due": "due", "hms": "handler_ms", "fp": "fp", "next": "next", "from": "from",
           "ac": "attempt_claimed", "cause": "lateness_cause"}
SINGLE = ("reason", "meta", "payload", "actor")


def _s(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def explode(fields: dict, partition: int = 0) -> list[dict[str, str | bytes | None]]:
    """One stream entry -> one dict per message (str values; ``payload`` stays bytes)."""
    f = {_s(k): v for k, v in fields.items()}
    if "e" not in f:   # not an entry of ours (or a v1 entry): pass it through as one row
        return [{k: (v if k == "payload" else _s(v)) for k, v in f.items()}]
    ids = _s(f.get("ids", b"")).split(",") if f.get("ids") else []
    n = len(ids)
    ts = _s(f["ts"])
    event = _s(f["e"])
    group = _s(f.get("g", b"")) or None
    columns = {}
    for raw, name in COLUMNS.items():
        if raw in f:
            values = _s(f[raw]).split(",")
            columns[name] = values if len(values) == n else [values[0]] * n
    rows = []
    for i, msg_id in enumerate(ids):
        row: dict[str, str | bytes | None] = {"event": event, "msg": msg_id, "ts": ts, "group": group,
                                              "partition": str(partition)}
        for name, values in columns.items():
            if values[i] != "":
                row[name] = values[i]
        if event == "claimed" and row.get("due"):
            row["lateness_ms"] = str(int(ts) - int(row["due"]))
        if "lateness_cause" in row:   # "key_held:<holder>": the cause, and the holder apart
            row["lateness_cause"], _, behind = row["lateness_cause"].partition(":")
            if behind:
                row["late_behind"] = behind
        if "attempt_claimed" in row:   # acked: "attempt|claim ms" as the lease held them
            attempt, _, claimed = row.pop("attempt_claimed").partition("|")
            row["attempt"] = attempt
            row["handler_ms"] = str(int(ts) - int(claimed))
        for name in SINGLE:
            if name in f:
                row[name] = f[name] if name == "payload" else _s(f[name])
        rows.append(row)
    return rows


def read_events(queue, topic: str, *, group: str | None = None) -> list[dict]:
    """Every event still in the topic's streams, per message, oldest first within a partition
    (partitions one after another). For tests and tools; the archiver reads incrementally."""
    out = []
    for p in range(queue.layout(topic).partitions):
        for _eid, fields in queue.redis.xrange(queue.keys(topic, p).events):
            out += [r for r in explode(fields, p) if group is None or r["group"] in (None, group)]
    return out


def rows_of(entries: Iterable[tuple[bytes, dict]], partition: int = 0) -> list[tuple[str, dict]]:
    """(stream id, row) per message for a list of stream entries; the id is shared by the rows of
    one entry, so a row is identified by (stream id, msg)."""
    out = []
    for eid, fields in entries:
        out += [(_s(eid), row) for row in explode(fields, partition)]
    return out
