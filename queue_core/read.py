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
    partition_of,
    topics_registry_key,
    validate_group,
)
from .message import Message, ms_to_dt
from .states import ALL_STATES, MessageState

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

    def _partitions(self, topic: str) -> range:
        return range(self.layout(topic).partitions)

    def _pipeline(self, fill) -> list:
        """Run ``fill(pipe, p)`` for each partition of a pipeline; one round trip (per node)."""
        pipe = self.redis.pipeline(transaction=False)
        for item in fill:
            item(pipe)
        return pipe.execute()

    def topics(self) -> list[str]:
        """Every topic configured or published to. One round trip, O(topics)."""
        return sorted(_text(t) for t in self.redis.smembers(topics_registry_key(self.prefix)))

    def documented_keys(self) -> set[str]:
        """Every key the documented layout may hold: for each registered topic, its partitions'
        keys and its groups' keys, plus the registry and the archiver's lock."""
        documented = {topics_registry_key(self.prefix), archiver_lock_key(self.prefix)}
        for topic in self.topics():
            layout = self.layout(topic, fresh=True)
            for p in range(layout.partitions):
                pk = self.keys(topic, p).p
                documented.update(getattr(pk, n) for n in PARTITION_KEY_NAMES)
                for group in layout.groups:
                    gk = self.keys(topic, p, group).g
                    documented.update(getattr(gk, n) for n in GROUP_KEY_NAMES)
        return documented

    def undocumented_keys(self, scan_count: int = 1000) -> list[str]:
        """Keys under this queue's prefix that are not in the documented layout: what a leak would
        look like. Walks SCAN, so Redis is never blocked; O(keys under the prefix)."""
        documented = self.documented_keys()
        found = (_text(k) for k in self.redis.scan_iter(match=f"{self.prefix}:*", count=scan_count))
        # A worker's private wake-up list (keys.wake_key) sits beside a documented signal list.
        return sorted(k for k in found if k not in documented and k.partition(":wake:")[0] not in documented)

    def counts(self, topic: str, *, group: str = DEFAULT_GROUP) -> dict[MessageState, int]:
        """Messages per state in ``group``: one atomic snapshot per partition, summed. One round
        trip per partition (pipelined where the client allows), O(1) each."""
        calls = [(self._group_keys(topic, group, p), None) for p in self._partitions(topic)]
        if len(calls) == 1 or self.cluster:
            replies = [self.scripts.counts(keys=[k.state(s) for s in ALL_STATES]) for k, _ in calls]
        else:
            pipe = self.redis.pipeline(transaction=False)
            for k, _ in calls:
                self.scripts.counts(keys=[k.state(s) for s in ALL_STATES], client=pipe)
            replies = pipe.execute()
        return _sum_counts(replies)

    def get(self, topic: str, msg_id: str, *, group: str = DEFAULT_GROUP) -> Message | None:
        """One message as ``group`` sees it (state, payload, history, last error), or None when the
        group does not hold it. One round trip, O(1)."""
        p = partition_of(msg_id)
        if p >= self.layout(topic).partitions:
            return None
        k = self._group_keys(topic, group, p)
        state, score, record, info, att, lease, tb, holder = self.scripts.get(keys=k.as_list(), args=[msg_id])
        if not state:
            return None   # not in this group (acked, cancelled, or published before the group existed)
        return self._message(topic, group, p, msg_id, state, score, record, info, att, lease, tb, holder)

    def peek(self, topic: str, state: MessageState | str, offset: int = 0, limit: int = 50, *,
             group: str = DEFAULT_GROUP) -> list[Message]:
        """A page of one state ordered by score (due time, lease deadline or time of death)."""
        return self.page(topic, state, limit=limit, offset=offset, group=group).messages

    def page(self, topic: str, state: MessageState | str, *, limit: int = 50, after: str | None = None,
             offset: int = 0, group: str = DEFAULT_GROUP, partition: int | None = None) -> Page:
        """Cursor pagination ordered by (score, id) across the partitions (or one ``partition``);
        ``after`` is the previous page's ``next_cursor``. One round trip per partition, each
        O(log n + limit) at any depth."""
        state = MessageState(state)
        inner = decode_cursor(after)
        limit = max(1, min(int(limit), 1000))
        score, after_id = ("", "")
        if inner:
            score, _, after_id = inner.partition("/")
        parts = [partition] if partition is not None else list(self._partitions(topic))
        if len(parts) > 1 and offset:
            # Merging needs every partition's first offset + limit rows.
            take, skip = min(offset + limit, MAX_OFFSET), offset
            fetch_offset = 0
        else:
            take, skip, fetch_offset = limit, 0, offset
        runs = []
        for p in parts:
            rows = self.scripts.peek(keys=self._group_keys(topic, group, p).as_list(),
                                     args=[state.value, int(fetch_offset), take, score, after_id])
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

    def group_page(self, topic: str, fingerprint: str, *, limit: int = 50, after: str | None = None,
                   group: str = DEFAULT_GROUP) -> Page:
        """Dead letters of one error group, oldest death first, from the group's index (never a
        scan of the whole DLQ). ``after`` is the previous page's ``next_cursor``. Two round trips
        per partition, O(log n + limit)."""
        inner = decode_cursor(after, prefix=f"{fingerprint}:")
        limit = max(1, min(int(limit), 1000))
        low = f"({inner}" if inner else f"[{fingerprint}:"
        members = []
        for p in self._partitions(topic):
            k = self._group_keys(topic, group, p)
            members += [(_text(m), p) for m in self.redis.zrangebylex(k.fp_index, low, f"({fingerprint};",
                                                                      start=0, num=limit)]
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
            pipe = self.redis.pipeline(transaction=False)
            for name in ("msgs", "info", "att", "tracebacks"):
                pipe.hmget(getattr(k, name), ids)
            pipe.zmscore(k.dead, ids)
            records, infos, atts, tbs, scores = pipe.execute()
            for i, msg_id in enumerate(ids):
                if scores[i] is not None:
                    found[msg_id] = self._message(topic, group, p, msg_id, "dead", scores[i], records[i], infos[i],
                                                  atts[i], None, tbs[i], None)
        for m, _p in members:
            msg = found.get(m.rsplit(":", 1)[1])
            if msg is not None:
                messages.append(msg)
        return Page(messages, encode_cursor(members[-1][0]) if len(members) == limit else None)

    def error_groups(self, topic: str, limit: int = 100, *, group: str = DEFAULT_GROUP) -> list[ErrorGroup]:
        """Dead-letter groups by error fingerprint, largest first, summed over the partitions.
        One round trip (pipelined), O(error groups)."""
        fills = []
        for p in self._partitions(topic):
            k = self._group_keys(topic, group, p)
            fills += [lambda pipe, k=k: pipe.hgetall(k.fp_count), lambda pipe, k=k: pipe.hgetall(k.fp_info)]
        replies = self._pipeline(fills)
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

    def dead_count(self, topic: str, fingerprint: str | None = None, since_ms: int = 0,
                   until_ms: int | None = None, *, group: str = DEFAULT_GROUP) -> int:
        """Dead letters (of one error group) that died in [since_ms, until_ms]. One round trip,
        O(log n) per partition: the same range replay_dead walks."""
        until = "+inf" if until_ms is None else until_ms
        upper = f"[{fp_member(fingerprint, until_ms, '')[:-1]};" if until_ms is not None else f"({fingerprint};"
        fills = []
        for p in self._partitions(topic):
            k = self._group_keys(topic, group, p)
            if not fingerprint:
                fills.append(lambda pipe, k=k: pipe.zcount(k.dead, since_ms, until))
            else:
                fills.append(lambda pipe, k=k: pipe.zlexcount(k.fp_index, f"[{fp_member(fingerprint, since_ms, '')[:-1]}", upper))
        return sum(int(n) for n in self._pipeline(fills))

    def stats(self, topic: str, *, group: str = DEFAULT_GROUP) -> dict[str, int]:
        """Lifetime counters of ``group`` (published, claimed, acked, nacked, expired, dead,
        replayed, evicted, cancelled, deleted, ttl_expired), summed over the partitions. One round
        trip, O(1)."""
        pipe = self.redis.pipeline(transaction=False)
        for p in self._partitions(topic):
            pipe.hgetall(self._group_keys(topic, group, p).stats)
        return _sum_stats(pipe.execute())

    def workers(self, topic: str, within: float = 30.0, *, group: str = DEFAULT_GROUP) -> list[str]:
        """Worker ids that sent a heartbeat for this topic's group in the last ``within`` seconds,
        by Redis's clock. Two round trips (TIME, then the range), O(log n + workers)."""
        k = self._group_keys(topic, group, 0)
        ids = self.redis.zrangebyscore(k.workers, self.server_ms() - within * 1000, "+inf")
        return [_text(i) for i in ids]

    def throughput(self, topic: str, *, group: str = DEFAULT_GROUP) -> dict:
        """Events per minute from the group's per-minute counters: published, acked and dead
        (dead-letter inflow) over the last minute and the last hour, the oldest ready message's
        due time, the pending messages already overdue by more than a second, and the live workers. One round trip (pipelined), O(60) per partition."""
        now_ms = self.server_ms()
        parts = list(self._partitions(topic))
        fills = self._throughput_fills(topic, group, parts, now_ms)
        return self._throughput(self._pipeline(fills), len(parts), now_ms)

    def lateness(self, topic: str, *, group: str = DEFAULT_GROUP, minutes: int = 5) -> dict:
        """Claim lateness (claim time - due time, by Redis's clock) over the last ``minutes``
        (the current one included) from the per-minute histogram claims keep: the number of
        deliveries and the p50/p99 as the upper bound (ms) of the histogram bucket they fall in
        (None without deliveries; ``inf`` above the last bound, 60 s). One round trip."""
        if not 1 <= minutes <= 60:
            raise InvalidArgument("minutes must be between 1 and 60 (the counters keep an hour)")
        now_ms = self.server_ms()
        minute = now_ms // 60_000
        nb = len(LATENESS_BOUNDS_MS) + 1
        fields = [f"{m}:late{b}" for m in range(minute - minutes + 1, minute + 1) for b in range(nb)]
        counts = [0] * nb
        keys = [self._group_keys(topic, group, p).minutes for p in self._partitions(topic)]
        for values in self._pipeline([lambda pipe, key=key: pipe.hmget(key, fields) for key in keys]):
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

    def last_heartbeat_age(self, topic: str, *, group: str = DEFAULT_GROUP) -> float | None:
        """Seconds since the newest worker heartbeat of the group (None: no worker ever beat, or
        the last one signed off). One round trip."""
        k = self._group_keys(topic, group, 0)
        pipe = self.redis.pipeline(transaction=False)
        pipe.time()
        pipe.zrevrange(k.workers, 0, 0, withscores=True)
        (sec, usec), newest = pipe.execute()
        if not newest:
            return None
        return max(0.0, (int(sec) * 1000 + int(usec) // 1000 - newest[0][1]) / 1000)

    def summaries(self, topic_groups: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict]:
        """For each (topic, group): its counts per state, throughput (as ``throughput``, acked and
        dead only: the pages show no publish rate), paused and ordered flags, for pages that show
        many groups at once. Three round trips in all however many groups (layouts, Redis's clock,
        one pipeline), instead of four per group; on a cluster client, one group at a time."""
        pairs, layouts = self._many(topic_groups)
        if self.cluster:   # scripts in a cross-slot pipeline: keep to the per-group calls there
            out = {}
            for t, g in pairs:
                cfg = self.group_config(t, g)
                out[(t, g)] = {"counts": self.counts(t, group=g), **self.throughput(t, group=g),
                               "paused": cfg.paused, "ordered": cfg.ordered}
            return out
        now_ms = self.server_ms()
        pipe = self.redis.pipeline(transaction=False)
        plan = []
        for topic, group in pairs:
            parts = list(range(layouts[topic].partitions))
            for p in parts:
                self.scripts.counts(keys=[self._group_keys(topic, group, p).state(s) for s in ALL_STATES],
                                    client=pipe)
            pipe.hmget(self._group_keys(topic, group, 0).g.config, ["paused", "ordered"])
            fills = self._throughput_fills(topic, group, parts, now_ms, _SUMMARY_EVENTS)
            for fill in fills:
                fill(pipe)
            plan.append((topic, group, len(parts), len(fills)))
        replies = pipe.execute()
        out, i = {}, 0
        for topic, group, nparts, nfills in plan:
            counts = _sum_counts(replies[i:i + nparts])
            paused, ordered = (flag in (b"1", "1") for flag in replies[i + nparts])
            i += nparts + 1
            out[(topic, group)] = {"counts": counts,
                                   **self._throughput(replies[i:i + nfills], nparts, now_ms, _SUMMARY_EVENTS),
                                   "paused": paused, "ordered": ordered}
            i += nfills
        return out

    def snapshot(self, topic_groups: Sequence[tuple[str, str]]) -> tuple[int, dict[tuple[str, str], dict]]:
        """Redis's time (ms) and, for each (topic, group): counts per state, the oldest ready
        message's due time (ms, or None), the lifetime counters (as ``stats``), the live workers
        (heartbeat in the last 30 s, among the newest 1,000) and the paused flag. For a metrics
        scrape: one pipelined round trip, plus one for layouts not cached; on a cluster client,
        one group at a time."""
        pairs, layouts = self._many(topic_groups)
        if self.cluster:
            now_ms = self.server_ms()
            out = {}
            for t, g in pairs:
                head = [self.redis.zrange(self._group_keys(t, g, p).ready, 0, 0, withscores=True)
                        for p in range(layouts[t].partitions)]
                due = [h[0][1] for h in head if h]
                out[(t, g)] = {"counts": self.counts(t, group=g), "oldest_ready_ms": min(due) if due else None,
                               "stats": self.stats(t, group=g), "workers": len(self.workers(t, group=g)),
                               "paused": self.group_config(t, g).paused}
            return now_ms, out
        pipe = self.redis.pipeline(transaction=False)
        pipe.time()
        for topic, group in pairs:
            for p in range(layouts[topic].partitions):
                k = self._group_keys(topic, group, p)
                self.scripts.counts(keys=[k.state(s) for s in ALL_STATES], client=pipe)
                pipe.zrange(k.ready, 0, 0, withscores=True)
                pipe.hgetall(k.stats)
            k0 = self._group_keys(topic, group, 0)
            pipe.zrevrange(k0.workers, 0, 999, withscores=True)
            pipe.hget(k0.g.config, "paused")
        replies = pipe.execute()
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

    def _many(self, topic_groups: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], dict]:
        """The (topic, group) pairs of a batched read, each once and each group name checked, and
        the topics' layouts (one round trip for those not cached)."""
        pairs = list(dict.fromkeys(topic_groups))
        for _topic, group in pairs:
            validate_group(group)
        return pairs, self.layouts(t for t, _ in pairs)

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
    def _throughput(replies: list, nparts: int, now_ms: int, events: tuple[str, ...] = _RATE_EVENTS) -> dict:
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
