"""The read model: lookups and pages of one group (lua/get.lua, peek.lua), error groups, the topic
registry and the key audit. Nothing here changes Redis. Each docstring states the cost, so the
dashboard can be kept cheap at a million messages. With P partitions most reads are one pipelined
round trip that touches P shards; pages merge P sorted runs, so a page costs O(P * (log n + limit))."""

import base64
import heapq
import json
import re
from dataclasses import dataclass
from datetime import datetime

from ..errors import InvalidArgument
from ..journal import META_SUFFIX, PROGRESS_SUFFIX, Journal
from ..keys import (
    DEFAULT_GROUP,
    GROUP_KEY_NAMES,
    archiver_lock_key,
    fp_member,
    index_legacy_keys,
    index_log_keys,
    metrics_snapshot_key,
    partition_of,
    ready_due_ms,
    schedules_registry_key,
    schedules_version_key,
    topics_registry_key,
    worker_details_key,
)
from ..message import Message, ms_to_dt
from ..states import MessageState
from ..steps import cmd, operation, pipeline, script
from .base import EngineBase, as_text

MAX_OFFSET = 10_000   # offset paging over several partitions reads offset + limit from each
MAX_STATES_IDS = 1_000   # ids states() looks up in one call
ACKED_CHUNK = 500   # stream entries acked() reads a command
# Inside a page cursor: "<score>/<message id>" (the last row of the previous page; '~' sorts after
# every id), or for an error group's pages the last index member. Outside it is opaque: base64url.
_CURSOR = re.compile(r"^-?[0-9][0-9.e+-]{0,30}/[0-9A-Za-z._~-]{0,80}$")


def encode_cursor(inner: str) -> str:
    return base64.urlsafe_b64encode(inner.encode()).decode().rstrip("=")


def position_cursor(score, msg_id: str) -> str:
    """The cursor of a page that continues after (score, msg_id)."""
    return encode_cursor(f"{score}/{msg_id}")


def decode_cursor(after: str | None, prefix: str = "") -> str | None:
    """What a cursor holds; InvalidArgument for anything that is not one of ours. Cursors travel
    through URLs: they are refused before Redis sees them."""
    if not after:
        return None
    try:
        if len(after) > 400:
            raise ValueError
        inner = base64.urlsafe_b64decode(after + "=" * (-len(after) % 4)).decode()
        ok = (inner.startswith(prefix) and len(inner) <= 300 and inner.isprintable()) if prefix else bool(
            _CURSOR.fullmatch(inner))
        if not ok:
            raise ValueError
    except ValueError:   # binascii.Error and UnicodeDecodeError are ValueErrors
        raise InvalidArgument(f"malformed page cursor {after[:60]!r}: follow the previous page's 'next' link, or "
                              "start again from the first page") from None
    return inner


@dataclass(frozen=True, slots=True)
class AckedSince:
    """acked()'s answer: the ids the event stream records as acked (in the order asked), where each
    partition's stream was read up to (pass it back as ``since``), and whether every stream was
    read to its end."""

    ids: list[str]
    cursor: dict[str, str]
    complete: bool


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    fingerprint: str
    count: int
    error_type: str
    sample_message: str
    sample_id: str
    first_seen: datetime | None
    last_seen: datetime | None


@dataclass(frozen=True, slots=True)
class Page:
    messages: list[Message]
    next_cursor: str | None   # pass as ``after`` for the next page; None at the end


class Read(EngineBase):
    """Lookups, pages, error groups, the registry and the key audit."""

    def _topics(self):
        """Every topic configured or published to. One round trip, O(topics)."""
        return sorted(as_text(t) for t in (yield cmd("smembers", topics_registry_key(self.prefix))))

    topics = operation(_topics)

    def _documented_keys(self):
        """Every key the documented layout may hold: for each registered topic, its partitions'
        keys and its groups' keys, the details key of each worker in its groups' heartbeats, plus
        the registry, the archiver's lock, the metrics snapshot, and the schedule registry and its version."""
        documented = {topics_registry_key(self.prefix), archiver_lock_key(self.prefix),
                      metrics_snapshot_key(self.prefix), schedules_registry_key(self.prefix),
                      schedules_version_key(self.prefix)}
        heartbeats = []
        for topic in (yield from self._topics()):
            layout = yield from self._layout(topic, fresh=True)
            heartbeats += [(group, self.keys(topic, 0, group).workers) for group in layout.groups]
            for p in range(layout.partitions):
                pk = self.keys(topic, p).p
                documented.update(pk.as_list())
                documented.update(index_log_keys(pk) + index_legacy_keys(pk))
                for group in layout.groups:
                    gk = self.keys(topic, p, group).g
                    documented.update(getattr(gk, n) for n in GROUP_KEY_NAMES)
        if heartbeats:
            def fill(pipe):
                for _group, key in heartbeats:
                    pipe.zrange(key, 0, -1)   # bounded: heartbeats older than an hour are pruned
            for (group, _key), ids in zip(heartbeats, (yield pipeline(fill)), strict=True):
                documented.update(worker_details_key(group, as_text(i), self.prefix) for i in ids)
        return documented

    documented_keys = operation(_documented_keys)

    def _undocumented_keys(self, scan_count: int = 1000):
        """Keys under this queue's prefix that are not in the documented layout: what a leak would
        look like. Walks SCAN, so Redis is never blocked; O(keys under the prefix)."""
        documented = yield from self._documented_keys()
        found = yield from self._scan(f"{self.prefix}:*", scan_count)
        # A worker's private wake-up list (keys.wake_key) sits beside a documented signal list.
        return sorted(k for k in found if k not in documented and k.partition(":wake:")[0] not in documented)

    undocumented_keys = operation(_undocumented_keys)

    def _scan(self, match: str, count: int):
        """Every key matching ``match``, by SCAN (on a cluster client, redis-py's scan_iter walks
        every node)."""
        if self.cluster:
            return [as_text(k) for k in (yield lambda client: _collect(client.scan_iter(match=match, count=count)))]
        found, cursor = [], 0
        while True:
            cursor, keys = yield cmd("scan", cursor, match=match, count=count)
            found += [as_text(k) for k in keys]
            if not int(cursor):
                return found

    def _get(self, topic: str, msg_id: str, *, group: str = DEFAULT_GROUP):
        """One message as ``group`` sees it (state, payload, history, last error), or None when the
        group does not hold it. One round trip, O(1)."""
        p = partition_of(msg_id)
        if p >= (yield from self._layout(topic)).partitions:
            return None
        k = self._group_keys(topic, group, p)
        state, score, record, info, att, lease, tb, holder, disp, chain = yield script(
            self.scripts.get, k.as_list(), [msg_id])
        if not state:
            return None   # not in this group (acked, cancelled, or published before the group existed)
        m = self._message(topic, group, p, msg_id, state, score, record, info, att, lease, tb, holder, disp)
        if chain:   # "<parent>|<delay ms>|<group>" (lua/includes/chain.lua)
            parent, delay_ms, _ = as_text(chain).split("|", 2)
            m.waiting_for, m.waiting_delay = parent, int(delay_ms) / 1000
        return m

    get = operation(_get)

    def _states(self, topic: str, ids: list[str], *, group: str = DEFAULT_GROUP):
        """The state of each of ``ids`` in ``group`` (None: the group no longer holds it: acked,
        cancelled or deleted), in the order given. At most 1,000 ids; one pipelined round trip of
        a ZSCORE per id and state, O(log n) each (a canary's outcome is read this way)."""
        if len(ids) > MAX_STATES_IDS:
            raise InvalidArgument(f"states reads at most {MAX_STATES_IDS:,} ids at once (got {len(ids):,})")
        partitions = (yield from self._layout(topic)).partitions
        known = [msg_id for msg_id in ids if partition_of(msg_id) < partitions]
        order = list(MessageState)

        def fill(pipe):
            for msg_id in known:
                k = self._group_keys(topic, group, partition_of(msg_id))
                for state in order:
                    pipe.zscore(k.state(state), msg_id)
        scores = (yield pipeline(fill)) if known else []
        found = {msg_id: next((s for s, score in zip(order, scores[i * len(order):(i + 1) * len(order)], strict=True)
                               if score is not None), None) for i, msg_id in enumerate(known)}
        return [found.get(msg_id) for msg_id in ids]

    states = operation(_states)

    def _acked(self, topic: str, ids: list[str], *, group: str = DEFAULT_GROUP, since: int | dict = 0,
               max_entries: int = 20_000):
        """Which of ``ids`` the event stream records as acked in ``group``, reading forward from
        ``since``: Redis ms (from then on, in each partition holding one of the ids) or the
        ``cursor`` of a previous call (from where it stopped). An ack leaves no other trace (the
        group drops the message), so this is what tells an ack from a delete, a cancel or an
        expiry. At most ``max_entries`` entries of each partition's stream a call, XRANGE by 500:
        ``complete`` is False when a stream holds more; call again with the cursor. A topic with
        events off records no acks (``TopicConfig.events``); entries the stream trimmed before
        they were read are not seen (the answer can only be short, never wrong)."""
        if len(ids) > MAX_STATES_IDS:
            raise InvalidArgument(f"acked reads at most {MAX_STATES_IDS:,} ids at once (got {len(ids):,})")
        partitions = (yield from self._layout(topic)).partitions
        wanted = {msg_id for msg_id in ids if partition_of(msg_id) < partitions}
        cursor = dict(since) if isinstance(since, dict) else {}
        first = "0-0" if isinstance(since, dict) else f"{int(since)}-0"
        acked, complete = set(), True
        for p in sorted({partition_of(msg_id) for msg_id in wanted}):
            # A cursor holds each stream's next XRANGE start: "(<last id read>" once one was read.
            start, key, read = cursor.get(str(p), first), self.keys(topic, p).events, 0
            while True:
                entries = yield cmd("xrange", key, start, "+", ACKED_CHUNK)
                for _eid, fields in entries:
                    if fields.get(b"e") == b"acked" and as_text(fields.get(b"g", b"")) == group:
                        acked.update(wanted.intersection(as_text(fields.get(b"ids", b"")).split(",")))
                if entries:
                    start = f"({as_text(entries[-1][0])}"
                read += len(entries)
                if len(entries) < ACKED_CHUNK:
                    break
                if read >= max_entries:
                    complete = False
                    break
            cursor[str(p)] = start
        return AckedSince([msg_id for msg_id in ids if msg_id in acked], cursor, complete)

    acked = operation(_acked)

    def _journal(self, topic: str, msg_id: str, *, group: str = DEFAULT_GROUP):
        """What the handlers of a message reported in ``group`` (message.progress(), .log()): a
        Journal, empty when nothing was (or the message is gone). Two round trips, O(log kept)."""
        p = partition_of(msg_id)
        if p >= (yield from self._layout(topic)).partitions:
            return Journal.parse(None, [])
        key = self._group_keys(topic, group, p).journal
        meta, progress = yield cmd("hmget", key, msg_id + META_SUFFIX, msg_id + PROGRESS_SUFFIX)
        fields = Journal.chunk_fields(msg_id, meta)
        return Journal.parse(progress, (yield cmd("hmget", key, fields)) if fields else [])

    journal = operation(_journal)

    def _peek(self, topic: str, state: MessageState | str, offset: int = 0, limit: int = 50, *,
              group: str = DEFAULT_GROUP, reverse: bool = False):
        """A page of one state ordered by score (due time, lease deadline or time of death);
        ``reverse``: highest score first."""
        return (yield from self._page(topic, state, limit=limit, offset=offset, group=group,
                                      reverse=reverse)).messages

    peek = operation(_peek)

    def _page(self, topic: str, state: MessageState | str, *, limit: int = 50, after: str | None = None,
              offset: int = 0, group: str = DEFAULT_GROUP, partition: int | None = None,
              reverse: bool = False):
        """Cursor pagination ordered by (score, id) across the partitions (or one ``partition``);
        ``reverse`` orders by (score, id) descending (newest dead letters first). ``after`` is the
        previous page's ``next_cursor``, read in the same direction: a cursor names a position, so
        one taken from an ascending page continues a reversed walk from that same row downwards.
        One round trip per partition, each O(log n + limit) at any depth. A held message (``held``)
        comes with its ``held_by``, read in the same script call."""
        state = MessageState(state)
        inner = decode_cursor(after)
        limit = max(1, min(int(limit), 1000))
        score, after_id = ("", "")
        if inner:
            score, _, after_id = inner.partition("/")
        parts = [partition] if partition is not None else list((yield from self._partitions(topic)))
        if len(parts) > 1 and offset:
            # Merging needs every partition's first offset + limit rows.
            take, skip = min(offset + limit, MAX_OFFSET), offset
            fetch_offset = 0
        else:
            take, skip, fetch_offset = limit, 0, offset
        runs = []
        for p in parts:
            rows = yield script(self.scripts.peek, self._group_keys(topic, group, p).as_list(),
                                [state.value, int(fetch_offset), take, score, after_id, "1" if reverse else ""])
            run = []
            for i in range(0, len(rows), 9):
                msg_id, sc, record, info, att, lease, tb, disp, holder = rows[i:i + 9]
                run.append((float(sc), as_text(msg_id), p, (record, info, att, lease, tb, holder, disp)))
            runs.append(run)
        merged = list(heapq.merge(*runs, key=lambda r: (r[0], r[1]), reverse=reverse))[skip:skip + limit]
        messages = [self._message(topic, group, p, msg_id, state.value, sc, *rest) for sc, msg_id, p, rest in merged]
        next_cursor = None
        if len(messages) == limit:
            last = merged[-1]
            next_cursor = position_cursor(_score_text(last[0]), last[1])
        return Page(messages, next_cursor)

    page = operation(_page)

    def _group_page(self, topic: str, fingerprint: str, *, limit: int = 50, after: str | None = None,
                    group: str = DEFAULT_GROUP, reverse: bool = False, since_ms: int | None = None,
                    until_ms: int | None = None):
        """Dead letters of one error group, oldest death first (``reverse``: newest first), from
        the group's index (never a scan of the whole DLQ), only those that died in [since_ms,
        until_ms] if given (the index's lex order is time order). ``after`` is the previous page's
        ``next_cursor``. Two round trips per partition, O(log n + limit)."""
        inner = decode_cursor(after, prefix=f"{fingerprint}:")
        limit = max(1, min(int(limit), 1000))
        low = f"[{fp_member(fingerprint, int(since_ms), '')}" if since_ms is not None else f"[{fingerprint}:"
        high = f"({fp_member(fingerprint, int(until_ms) + 1, '')}" if until_ms is not None else f"({fingerprint};"
        if inner:
            low, high = (low, f"({inner}") if reverse else (f"({inner}", high)
        members = []
        for p in (yield from self._partitions(topic)):
            k = self._group_keys(topic, group, p)
            read = (cmd("zrevrangebylex", k.fp_index, high, low, start=0, num=limit) if reverse
                    else cmd("zrangebylex", k.fp_index, low, high, start=0, num=limit))
            members += [(as_text(m), p) for m in (yield read)]
        members.sort(reverse=reverse)
        members = members[:limit]
        if not members:
            return Page([], None)
        messages = []
        by_partition: dict[int, list[str]] = {}
        for m, p in members:
            by_partition.setdefault(p, []).append(m.rsplit(":", 1)[1])
        found: dict[str, Message] = {}
        for p, ids in by_partition.items():
            k = self._group_keys(topic, group, p)

            def fill(pipe, k=k, ids=ids):
                for name in ("msgs", "info", "att", "tracebacks"):
                    pipe.hmget(getattr(k, name), ids)
                pipe.zmscore(k.dead, ids)
            records, infos, atts, tbs, scores = yield pipeline(fill)
            for i, msg_id in enumerate(ids):
                if scores[i] is not None:
                    found[msg_id] = self._message(topic, group, p, msg_id, "dead", scores[i], records[i], infos[i],
                                                  atts[i], None, tbs[i], None)
        for m, _p in members:
            msg = found.get(m.rsplit(":", 1)[1])
            if msg is not None:
                messages.append(msg)
        return Page(messages, encode_cursor(members[-1][0]) if len(members) == limit else None)

    group_page = operation(_group_page)

    def _error_groups(self, topic: str, limit: int = 100, *, group: str = DEFAULT_GROUP):
        """Dead-letter groups by error fingerprint, largest first, summed over the partitions.
        One round trip (pipelined), O(error groups)."""
        fills = []
        for p in (yield from self._partitions(topic)):
            k = self._group_keys(topic, group, p)
            fills += [lambda pipe, k=k: pipe.hgetall(k.fp_count), lambda pipe, k=k: pipe.hgetall(k.fp_info)]
        replies = yield from self._pipeline(fills)
        merged: dict[str, dict] = {}
        for counts, infos in zip(replies[0::2], replies[1::2], strict=True):
            for fp, count in counts.items():
                try:
                    info = json.loads(infos.get(fp, b"{}") or b"{}")
                except ValueError:
                    info = {}
                g = merged.setdefault(as_text(fp), {"count": 0, "t": info.get("t", ""), "m": info.get("m", ""),
                                                  "sample": info.get("sample", ""), "first": None, "last": None})
                g["count"] += int(count)
                for name, pick in (("first", min), ("last", max)):
                    value = info.get("first_seen" if name == "first" else "last_seen")
                    if value is not None:
                        g[name] = value if g[name] is None else pick(g[name], value)
        groups = [ErrorGroup(fp, g["count"], g["t"], g["m"], g["sample"], ms_to_dt(g["first"]), ms_to_dt(g["last"]))
                  for fp, g in merged.items()]
        groups.sort(key=lambda g: (-g.count, g.fingerprint))
        return groups[:limit]

    error_groups = operation(_error_groups)

    def _dead_count(self, topic: str, fingerprint: str | None = None, since_ms: int = 0,
                    until_ms: int | None = None, *, group: str = DEFAULT_GROUP):
        """Dead letters (of one error group) that died in [since_ms, until_ms]. One round trip,
        O(log n) per partition: the same range replay_dead walks."""
        until = "+inf" if until_ms is None else until_ms
        upper = f"[{fp_member(fingerprint, until_ms, '')[:-1]};" if until_ms is not None else f"({fingerprint};"
        fills = []
        for p in (yield from self._partitions(topic)):
            k = self._group_keys(topic, group, p)
            if not fingerprint:
                fills.append(lambda pipe, k=k: pipe.zcount(k.dead, since_ms, until))
            else:
                fills.append(lambda pipe, k=k: pipe.zlexcount(k.fp_index, f"[{fp_member(fingerprint, since_ms, '')[:-1]}", upper))
        return sum(int(n) for n in (yield from self._pipeline(fills)))

    dead_count = operation(_dead_count)

    def _lease_counts(self, topic_groups):
        """{(topic, group): (unacked, expired)}: messages unacked now, and of them those whose lease
        ran out (score = lease deadline <= Redis's clock), which stay unacked until a claim in their
        group reaps them (to retrying, or dead out of attempts). What tells a group's unacked count
        from the in-flight its live workers report. TIME, then one pipeline of a ZCARD and a ZCOUNT
        per group and partition (O(log n) each), plus one for layouts not cached. InvalidArgument
        for anything but (topic, group) pairs of names."""
        given = None if isinstance(topic_groups, str | bytes) else list(topic_groups)
        if given is None or not all(isinstance(pair, tuple | list) and len(pair) == 2
                                    and all(isinstance(n, str) for n in pair) for pair in given):
            raise InvalidArgument(f"lease_counts takes (topic, group) pairs, not {topic_groups!r:.80}")
        pairs = list(dict.fromkeys((t, g) for t, g in given))
        layouts = yield from self._layouts_of(t for t, _ in pairs)
        now_ms = yield from self._server_ms()
        slots = [(t, g, p) for t, g in pairs for p in range(layouts[t].partitions)]

        def fill(pipe):
            for t, g, p in slots:
                key = self._group_keys(t, g, p).unacked
                pipe.zcard(key)
                pipe.zcount(key, "-inf", now_ms)
        replies = (yield pipeline(fill)) if slots else []
        out = {pair: (0, 0) for pair in pairs}
        for i, (t, g, _p) in enumerate(slots):
            unacked, expired = out[(t, g)]
            out[(t, g)] = (unacked + int(replies[2 * i]), expired + int(replies[2 * i + 1]))
        return out

    lease_counts = operation(_lease_counts)

    def _message(self, topic, group, partition, msg_id, state, score, record, info, att, lease, tb,
                 holder, disp=None) -> Message:
        st = MessageState(as_text(state)) if state else None
        score = float(score) if st else None
        if st is MessageState.ready:
            score = ready_due_ms(score)   # less the priority's head start (lua/includes/dispatch.lua)
        return Message(as_text(msg_id), topic, None, st, group=group, partition=partition,
                       record=record or None, info=info or None, attempts=att or None, lease=lease or None,
                       score=score, traceback=as_text(tb) if tb else "",
                       holder=as_text(holder) if holder else None, dispatch=disp or None)


def _collect(keys):
    """A cluster client's scan_iter as a list: a plain iterator from the blocking client, an
    awaitable of the list from the asyncio one (whose scan_iter is an async generator)."""
    if hasattr(keys, "__aiter__"):
        async def gather():
            return [k async for k in keys]
        return gather()
    return list(keys)


def _score_text(score: float) -> str:
    return str(int(score)) if score == int(score) else repr(score)
