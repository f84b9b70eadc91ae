"""The read model: counts, pages and lookups of one group. Nothing here changes Redis. Each
docstring states the cost, so the dashboard can be kept cheap at a million messages. With P
partitions most reads are one pipelined round trip that touches P shards; pages merge P sorted
runs, so a page costs O(P * (log n + limit))."""

import base64
import heapq
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .errors import InvalidArgument
from .keys import (
    DEFAULT_GROUP,
    GROUP_KEY_NAMES,
    LATENESS_BOUNDS_MS,
    PARTITION_KEY_NAMES,
    archiver_lock_key,
    fp_member,
    metrics_snapshot_key,
    partition_of,
    topics_registry_key,
    validate_group,
)
from .message import Message, ms_to_dt
from .scripts import pipeline_steps
from .states import ALL_STATES, MessageState
from .steps import cmd, operation, pipeline, script

MAX_OFFSET = 10_000   # offset paging over several partitions reads offset + limit from each
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


_RATE_EVENTS = ("published", "acked", "dead")   # the per-minute counters throughput reads
_SUMMARY_EVENTS = ("acked", "dead")             # what summaries read of them (a third fewer fields a group)
OVERDUE_GRACE_MS = 1_000   # a pending message due longer ago than this is overdue: nobody promoted it


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


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class QueueReader:
    """Mixed into DelayQueue; expects ``redis``, ``scripts``, ``keys()``, ``layout()``,
    ``_group_keys()`` and ``server_ms()``."""

    def _partitions(self, topic: str):
        return range((yield from self._layout(topic)).partitions)

    @staticmethod
    def _pipeline(fills: list, script_calls: list = ()):
        """Run each ``fill(pipe)`` of ``fills`` in one pipeline: one round trip (per node).
        ``script_calls``: the _KeyPicker of each script call the fills queue by SHA; they are
        loaded and the pipeline run again when the server lacks them (scripts.pipeline_steps)."""
        def fill_all(pipe):
            for fill in fills:
                fill(pipe)
        return (yield from pipeline_steps(fill_all, list(script_calls)))

    def _topics(self):
        """Every topic configured or published to. One round trip, O(topics)."""
        return sorted(_text(t) for t in (yield cmd("smembers", topics_registry_key(self.prefix))))

    topics = operation(_topics)

    def _documented_keys(self):
        """Every key the documented layout may hold: for each registered topic, its partitions'
        keys and its groups' keys, plus the registry and the archiver's lock."""
        documented = {topics_registry_key(self.prefix), archiver_lock_key(self.prefix),
                      metrics_snapshot_key(self.prefix)}
        for topic in (yield from self._topics()):
            layout = yield from self._layout(topic, fresh=True)
            for p in range(layout.partitions):
                pk = self.keys(topic, p).p
                documented.update(getattr(pk, n) for n in PARTITION_KEY_NAMES)
                for group in layout.groups:
                    gk = self.keys(topic, p, group).g
                    documented.update(getattr(gk, n) for n in GROUP_KEY_NAMES)
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
            return [_text(k) for k in (yield lambda client: _collect(client.scan_iter(match=match, count=count)))]
        found, cursor = [], 0
        while True:
            cursor, keys = yield cmd("scan", cursor, match=match, count=count)
            found += [_text(k) for k in keys]
            if not int(cursor):
                return found

    def _counts(self, topic: str, *, group: str = DEFAULT_GROUP):
        """Messages per state in ``group``: one atomic snapshot per partition, summed. One round
        trip per partition (pipelined where the client allows), O(1) each."""
        calls = [(_state_keys(self._group_keys(topic, group, p)), []) for p in (yield from self._partitions(topic))]
        return _sum_counts((yield from self._run_many(self.scripts.counts, calls)))

    counts = operation(_counts)

    def _get(self, topic: str, msg_id: str, *, group: str = DEFAULT_GROUP):
        """One message as ``group`` sees it (state, payload, history, last error), or None when the
        group does not hold it. One round trip, O(1)."""
        p = partition_of(msg_id)
        if p >= (yield from self._layout(topic)).partitions:
            return None
        k = self._group_keys(topic, group, p)
        state, score, record, info, att, lease, tb, holder = yield script(self.scripts.get, k.as_list(), [msg_id])
        if not state:
            return None   # not in this group (acked, cancelled, or published before the group existed)
        return self._message(topic, group, p, msg_id, state, score, record, info, att, lease, tb, holder)

    get = operation(_get)

    def _peek(self, topic: str, state: MessageState | str, offset: int = 0, limit: int = 50, *,
              group: str = DEFAULT_GROUP):
        """A page of one state ordered by score (due time, lease deadline or time of death)."""
        return (yield from self._page(topic, state, limit=limit, offset=offset, group=group)).messages

    peek = operation(_peek)

    def _page(self, topic: str, state: MessageState | str, *, limit: int = 50, after: str | None = None,
              offset: int = 0, group: str = DEFAULT_GROUP, partition: int | None = None):
        """Cursor pagination ordered by (score, id) across the partitions (or one ``partition``);
        ``after`` is the previous page's ``next_cursor``. One round trip per partition, each
        O(log n + limit) at any depth."""
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
                                [state.value, int(fetch_offset), take, score, after_id])
            run = []
            for i in range(0, len(rows), 7):
                msg_id, sc, record, info, att, lease, tb = rows[i:i + 7]
                run.append((float(sc), _text(msg_id), p, (record, info, att, lease, tb)))
            runs.append(run)
        merged = list(heapq.merge(*runs, key=lambda r: (r[0], r[1])))[skip:skip + limit]
        messages = [self._message(topic, group, p, msg_id, state.value, sc, *rest, None)
                    for sc, msg_id, p, rest in merged]
        next_cursor = None
        if len(messages) == limit:
            last = merged[-1]
            next_cursor = position_cursor(_score_text(last[0]), last[1])
        return Page(messages, next_cursor)

    page = operation(_page)

    def _group_page(self, topic: str, fingerprint: str, *, limit: int = 50, after: str | None = None,
                    group: str = DEFAULT_GROUP):
        """Dead letters of one error group, oldest death first, from the group's index (never a
        scan of the whole DLQ). ``after`` is the previous page's ``next_cursor``. Two round trips
        per partition, O(log n + limit)."""
        inner = decode_cursor(after, prefix=f"{fingerprint}:")
        limit = max(1, min(int(limit), 1000))
        low = f"({inner}" if inner else f"[{fingerprint}:"
        members = []
        for p in (yield from self._partitions(topic)):
            k = self._group_keys(topic, group, p)
            members += [(_text(m), p) for m in (yield cmd("zrangebylex", k.fp_index, low, f"({fingerprint};",
                                                          start=0, num=limit))]
        members.sort()
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
                g = merged.setdefault(_text(fp), {"count": 0, "t": info.get("t", ""), "m": info.get("m", ""),
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

    def _stats(self, topic: str, *, group: str = DEFAULT_GROUP):
        """Lifetime counters of ``group`` (published, claimed, acked, nacked, expired, dead,
        replayed, evicted, cancelled, deleted, ttl_expired), summed over the partitions. One round
        trip, O(1)."""
        keys = [self._group_keys(topic, group, p).stats for p in (yield from self._partitions(topic))]
        return _sum_stats((yield from self._pipeline([lambda pipe, key=key: pipe.hgetall(key) for key in keys])))

    stats = operation(_stats)

    def _workers(self, topic: str, within: float = 30.0, *, group: str = DEFAULT_GROUP):
        """Worker ids that sent a heartbeat for this topic's group in the last ``within`` seconds,
        by Redis's clock. Two round trips (TIME, then the range), O(log n + workers)."""
        k = self._group_keys(topic, group, 0)
        now_ms = yield from self._server_ms()
        ids = yield cmd("zrangebyscore", k.workers, now_ms - within * 1000, "+inf")
        return [_text(i) for i in ids]

    workers = operation(_workers)

    def _throughput(self, topic: str, *, group: str = DEFAULT_GROUP):
        """Events per minute from the group's per-minute counters: published, acked and dead
        (dead-letter inflow) over the last minute and the last hour, the oldest ready message's
        due time, the pending messages already overdue by more than a second, and the live workers. One round trip (pipelined), O(60) per partition."""
        now_ms = yield from self._server_ms()
        parts = list((yield from self._partitions(topic)))
        fills = self._throughput_fills(topic, group, parts, now_ms)
        return self._rates((yield from self._pipeline(fills)), len(parts), now_ms)

    throughput = operation(_throughput)

    def _lateness(self, topic: str, *, group: str = DEFAULT_GROUP, minutes: int = 5):
        """Claim lateness (claim time - due time, by Redis's clock) over the last ``minutes``
        (the current one included) from the per-minute histogram claims keep: the number of
        deliveries and the p50/p99 as the upper bound (ms) of the histogram bucket they fall in
        (None without deliveries; ``inf`` above the last bound, 60 s). One round trip."""
        if not 1 <= minutes <= 60:
            raise InvalidArgument("minutes must be between 1 and 60 (the counters keep an hour)")
        now_ms = yield from self._server_ms()
        minute = now_ms // 60_000
        nb = len(LATENESS_BOUNDS_MS) + 1
        fields = [f"{m}:late{b}" for m in range(minute - minutes + 1, minute + 1) for b in range(nb)]
        counts = [0] * nb
        keys = [self._group_keys(topic, group, p).minutes for p in (yield from self._partitions(topic))]
        for values in (yield from self._pipeline([lambda pipe, key=key: pipe.hmget(key, fields) for key in keys])):
            for i, v in enumerate(values):
                if v:
                    counts[i % nb] += int(v)
        total = sum(counts)
        bounds = [*LATENESS_BOUNDS_MS, float("inf")]

        def quantile(q: float) -> float | None:
            if not total:
                return None
            seen = 0
            for bound, n in zip(bounds, counts, strict=True):
                seen += n
                if seen >= q * total:
                    return bound
            return bounds[-1]
        return {"deliveries": total, "p50_ms": quantile(0.5), "p99_ms": quantile(0.99), "buckets": counts}

    lateness = operation(_lateness)

    def _last_heartbeat_age(self, topic: str, *, group: str = DEFAULT_GROUP):
        """Seconds since the newest worker heartbeat of the group (None: no worker ever beat, or
        the last one signed off). One round trip."""
        k = self._group_keys(topic, group, 0)

        def fill(pipe):
            pipe.time()
            pipe.zrevrange(k.workers, 0, 0, withscores=True)
        (sec, usec), newest = yield pipeline(fill)
        if not newest:
            return None
        return max(0.0, (int(sec) * 1000 + int(usec) // 1000 - newest[0][1]) / 1000)

    last_heartbeat_age = operation(_last_heartbeat_age)

    def _summaries(self, topic_groups: Sequence[tuple[str, str]]):
        """For each (topic, group): its counts per state, throughput (as ``throughput``, acked and
        dead only: the pages show no publish rate), paused and ordered flags, for pages that show
        many groups at once. Three round trips in all however many groups (layouts, Redis's clock,
        one pipeline), instead of four per group; on a cluster client, one group at a time."""
        pairs, layouts = yield from self._many(topic_groups)
        if self.cluster:   # scripts in a cross-slot pipeline: keep to the per-group calls there
            out = {}
            for t, g in pairs:
                cfg = yield from self._group_config(t, g)
                out[(t, g)] = {"counts": (yield from self._counts(t, group=g)),
                               **(yield from self._throughput(t, group=g)),
                               "paused": cfg.paused, "ordered": cfg.ordered}
            return out
        now_ms = yield from self._server_ms()
        plan, fills = [], []
        for topic, group in pairs:
            parts = list(range(layouts[topic].partitions))
            for p in parts:
                fills.append(self._counts_fill(self._group_keys(topic, group, p)))
            config_key = self._group_keys(topic, group, 0).g.config
            fills.append(lambda pipe, key=config_key: pipe.hmget(key, ["paused", "ordered"]))
            rate_fills = self._throughput_fills(topic, group, parts, now_ms, _SUMMARY_EVENTS)
            fills += rate_fills
            plan.append((topic, group, len(parts), len(rate_fills)))
        replies = yield from self._pipeline(fills, [self.scripts.counts] * sum(n for _t, _g, n, _f in plan))
        out, i = {}, 0
        for topic, group, nparts, nfills in plan:
            counts = _sum_counts(replies[i:i + nparts])
            paused, ordered = (flag in (b"1", "1") for flag in replies[i + nparts])
            i += nparts + 1
            out[(topic, group)] = {"counts": counts,
                                   **self._rates(replies[i:i + nfills], nparts, now_ms, _SUMMARY_EVENTS),
                                   "paused": paused, "ordered": ordered}
            i += nfills
        return out

    summaries = operation(_summaries)

    def _counts_fill(self, k):
        """A pipeline fill that queues the counts script for one group's keys in one partition."""
        keys = _state_keys(k)
        return lambda pipe: self.scripts.counts.add_to(pipe, keys, [])

    def _snapshot(self, topic_groups: Sequence[tuple[str, str]]):
        """Redis's time (ms) and, for each (topic, group): counts per state, the oldest ready
        message's due time (ms, or None), the lifetime counters (as ``stats``), the live workers
        (heartbeat in the last 30 s, among the newest 1,000) and the paused flag. For a metrics
        scrape: one pipelined round trip, plus one for layouts not cached; on a cluster client,
        one group at a time."""
        pairs, layouts = yield from self._many(topic_groups)
        if self.cluster:
            now_ms = yield from self._server_ms()
            out = {}
            for t, g in pairs:
                due = []
                for p in range(layouts[t].partitions):
                    head = yield cmd("zrange", self._group_keys(t, g, p).ready, 0, 0, withscores=True)
                    due += [head[0][1]] if head else []
                out[(t, g)] = {"counts": (yield from self._counts(t, group=g)),
                               "oldest_ready_ms": min(due) if due else None,
                               "stats": (yield from self._stats(t, group=g)),
                               "workers": len((yield from self._workers(t, group=g))),
                               "paused": (yield from self._group_config(t, g)).paused}
            return now_ms, out
        fills, script_calls = [lambda pipe: pipe.time()], []
        for topic, group in pairs:
            for p in range(layouts[topic].partitions):
                k = self._group_keys(topic, group, p)
                fills += [self._counts_fill(k), lambda pipe, k=k: pipe.zrange(k.ready, 0, 0, withscores=True),
                          lambda pipe, k=k: pipe.hgetall(k.stats)]
                script_calls.append(self.scripts.counts)
            k0 = self._group_keys(topic, group, 0)
            fills += [lambda pipe, k=k0: pipe.zrevrange(k.workers, 0, 999, withscores=True),
                      lambda pipe, k=k0: pipe.hget(k.g.config, "paused")]
        replies = yield from self._pipeline(fills, script_calls)
        sec, usec = replies[0]
        now_ms = int(sec) * 1000 + int(usec) // 1000
        out, i = {}, 1
        for topic, group in pairs:
            n = layouts[topic].partitions
            mine = replies[i:i + 3 * n]       # per partition: counts, the ready head, the counters
            due = [head[0][1] for head in mine[1::3] if head]
            workers, paused = replies[i + 3 * n:i + 3 * n + 2]
            i += 3 * n + 2
            out[(topic, group)] = {"counts": _sum_counts(mine[0::3]), "oldest_ready_ms": min(due) if due else None,
                                   "stats": _sum_stats(mine[2::3]),
                                   "workers": sum(1 for _w, beat in workers if beat >= now_ms - 30_000),
                                   "paused": paused in (b"1", "1")}
        return now_ms, out

    snapshot = operation(_snapshot)

    def _many(self, topic_groups: Sequence[tuple[str, str]]):
        """The (topic, group) pairs of a batched read, each once and each group name checked, and
        the topics' layouts (one round trip for those not cached)."""
        pairs = list(dict.fromkeys(topic_groups))
        for _topic, group in pairs:
            validate_group(group)
        return pairs, (yield from self._layouts_of(t for t, _ in pairs))

    def _throughput_fills(self, topic: str, group: str, parts: list[int], now_ms: int,
                          events: tuple[str, ...] = _RATE_EVENTS) -> list:
        overdue_before = now_ms - OVERDUE_GRACE_MS
        minute = now_ms // 60_000
        fields = [f"{m}:{e}" for m in range(minute - 60, minute + 1) for e in events]
        fills = []
        for p in parts:
            k = self._group_keys(topic, group, p)
            fills += [lambda pipe, k=k: pipe.hmget(k.minutes, fields),
                      lambda pipe, k=k: pipe.zrange(k.ready, 0, 0, withscores=True),
                      lambda pipe, k=k: pipe.zrange(k.pending, 0, 0, withscores=True),
                      lambda pipe, k=k: pipe.zcount(k.pending, "-inf", overdue_before)]
        k0 = self._group_keys(topic, group, 0)
        fills.append(lambda pipe: pipe.zcount(k0.workers, now_ms - 30_000, "+inf"))
        return fills

    @staticmethod
    def _rates(replies: list, nparts: int, now_ms: int, events: tuple[str, ...] = _RATE_EVENTS) -> dict:
        per_minute = {e: [0] * 61 for e in events}
        oldest = oldest_pending = None
        overdue = 0
        for n in range(nparts):
            values, head, pending_head, late = replies[4 * n: 4 * n + 4]
            for i, v in enumerate(values):
                if v:
                    per_minute[events[i % len(events)]][i // len(events)] += int(v)
            if head:
                oldest = head[0][1] if oldest is None else min(oldest, head[0][1])
            if pending_head:
                oldest_pending = pending_head[0][1] if oldest_pending is None else min(oldest_pending,
                                                                                       pending_head[0][1])
            overdue += int(late)
        # the current minute is partial: "last minute" is the last complete one plus the partial one
        # weighted, which keeps the figure steady instead of dropping to 0 at each minute boundary
        frac = (now_ms % 60_000) / 60_000
        out = {"now_ms": now_ms, "workers": int(replies[4 * nparts]),
               "oldest_ready_age_s": (now_ms - oldest) / 1000 if oldest is not None else None,
               # Due but still pending: workers promote due messages when they claim, so these mean
               # no worker is running for the group (or it is paused).
               "overdue_pending": overdue,
               "oldest_overdue_age_s": (now_ms - oldest_pending) / 1000 if overdue else None}
        for e in events:
            series = per_minute[e]
            out[f"{e}_last_minute"] = round(series[-1] + series[-2] * (1 - frac))
            out[f"{e}_last_hour"] = sum(series[1:])
        return out

    def _message(self, topic, group, partition, msg_id, state, score, record, info, att, lease, tb,
                 holder) -> Message:
        st = MessageState(_text(state)) if state else None
        return Message(_text(msg_id), topic, None, st, group=group, partition=partition,
                       record=record or None, info=info or None, attempts=att or None, lease=lease or None,
                       score=float(score) if st else None, traceback=_text(tb) if tb else "",
                       holder=_text(holder) if holder else None)


def _state_keys(k) -> list[str]:
    """The counts script's keys: one group's state sets in one partition, in ALL_STATES order."""
    return [k.state(s) for s in ALL_STATES]


def _collect(keys):
    """A cluster client's scan_iter as a list: a plain iterator from the blocking client, an
    awaitable of the list from the asyncio one (whose scan_iter is an async generator)."""
    if hasattr(keys, "__aiter__"):
        async def gather():
            return [k async for k in keys]
        return gather()
    return list(keys)


def _sum_counts(replies) -> dict[MessageState, int]:
    """Per-state totals of the counts script's replies (one per partition)."""
    totals = dict.fromkeys(ALL_STATES, 0)
    for values in replies:
        for s, v in zip(ALL_STATES, values, strict=True):
            totals[s] += int(v)
    return totals


_NOT_COUNTERS = ("seq", "oseq", "minutes_pruned")   # bookkeeping fields of the stats hash


def _sum_stats(raws) -> dict[str, int]:
    """Lifetime counters summed over the partitions' stats hashes."""
    totals: dict[str, int] = {}
    for raw in raws:
        for k, v in raw.items():
            name = _text(k)
            if name not in _NOT_COUNTERS:
                totals[name] = totals.get(name, 0) + int(v)
    return totals


def _score_text(score: float) -> str:
    return str(int(score)) if score == int(score) else repr(score)
