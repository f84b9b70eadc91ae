"""Statistics: counts per state (lua/counts.lua), lifetime counters, live workers (with the details
their heartbeats write, for the dashboard's Workers page), throughput and lateness from the
per-minute counters, and the batched summaries and snapshots that pages and /metrics read for many
groups in one round trip."""

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InvalidArgument
from ..keys import (
    DEFAULT_GROUP,
    LATENESS_BOUNDS_MS,
    LATENESS_CAUSES,
    ready_due_ms,
    validate_group,
    worker_details_key,
)
from ..states import ALL_STATES, MessageState
from ..steps import cmd, operation, pipeline
from .base import EngineBase, as_text

_RATE_EVENTS = ("published", "acked", "dead")   # the per-minute counters throughput reads
_SUMMARY_EVENTS = ("acked", "dead")             # what summaries read of them (a third fewer fields a group)
OVERDUE_GRACE_MS = 1_000   # a pending message due longer ago than this is overdue: nobody promoted it
MAX_WORKERS_PER_GROUP = 1_000   # live_workers reads the newest this many heartbeats of each group
SERIES_MINUTES = 60   # the per-minute series pages chart: the minutes hash keeps about an hour


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One live worker of one group. The details are None for a worker that sends only the bare
    heartbeat (an older delayq, or a caller of ``heartbeat`` without ``details``)."""

    id: str
    group: str
    topics: tuple[str, ...]      # the topics it consumes (those it beat for, without details)
    last_beat_ms: int            # its newest heartbeat, by Redis's clock
    host: str | None = None
    pid: int | None = None
    runtime: str | None = None   # "threads" (Worker) or "asyncio" (AsyncWorker)
    concurrency: int | None = None
    in_flight: int | None = None   # claimed and not yet settled at its last heartbeat
    started_ms: int | None = None  # by the worker's own clock
    version: str | None = None     # the delayq version it runs


@dataclass(frozen=True, slots=True)
class LiveWorkers:
    now_ms: int                                  # Redis's clock when read
    workers: list[WorkerInfo]                    # by group, then id
    unattended: list[tuple[str, str]]            # the (topic, group) pairs asked about with no live worker


class Stats(EngineBase):
    """Counts, counters, workers, throughput, lateness, summaries, snapshots."""

    def _counts(self, topic: str, *, group: str = DEFAULT_GROUP):
        """Messages per state in ``group``: one atomic snapshot per partition, summed. One round
        trip per partition (pipelined where the client allows), O(1) each."""
        calls = [(_state_keys(self._group_keys(topic, group, p)), []) for p in (yield from self._partitions(topic))]
        return _sum_counts((yield from self._run_many(self.scripts.counts, calls)))

    counts = operation(_counts)

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
        return [as_text(i) for i in ids]

    workers = operation(_workers)

    def _live_workers(self, topic_groups: Sequence[tuple[str, str]], within: float = 30.0):
        """Every worker with a heartbeat in the last ``within`` seconds (by Redis's clock) for any
        of ``topic_groups``, with the details its heartbeat wrote, and the pairs that have none.
        Two pipelined round trips however many groups and workers (the clock and each group's
        newest MAX_WORKERS_PER_GROUP heartbeats, then one GET per live worker; one more for the
        clock on a cluster client); O(groups + workers). No layout is read: heartbeats live in
        partition 0."""
        pairs = list(dict.fromkeys(topic_groups))
        keys = [self._group_keys(topic, group, 0).workers for topic, group in pairs]

        def beats(pipe):
            for key in keys:
                pipe.zrevrange(key, 0, MAX_WORKERS_PER_GROUP - 1, withscores=True)
        if self.cluster:   # TIME names no key: a cluster pipeline has no node to send it to
            now_ms = yield from self._server_ms()
            replies = (yield pipeline(beats)) if keys else []
        else:
            (sec, usec), *replies = yield pipeline(lambda pipe: (pipe.time(), beats(pipe)))
            now_ms = int(sec) * 1000 + int(usec) // 1000
        cutoff = now_ms - within * 1000
        seen: dict[tuple[str, str], dict] = {}   # (group, id) -> topics and newest beat
        unattended = []
        for (topic, group), rows in zip(pairs, replies, strict=True):
            live = [(as_text(wid), int(score)) for wid, score in rows if score >= cutoff]
            if not live:
                unattended.append((topic, group))
            for wid, beat in live:
                entry = seen.setdefault((group, wid), {"topics": [], "beat": beat})
                entry["topics"].append(topic)
                entry["beat"] = max(entry["beat"], beat)
        ids = sorted(seen)
        raws = []
        if ids:
            def details(pipe):
                for group, wid in ids:
                    pipe.get(worker_details_key(group, wid, self.prefix))
            raws = yield pipeline(details)
        workers = [_worker_info(group, wid, seen[(group, wid)], raw)
                   for (group, wid), raw in zip(ids, raws, strict=True)]
        return LiveWorkers(now_ms, workers, unattended)

    live_workers = operation(_live_workers)

    def _throughput(self, topic: str, *, group: str = DEFAULT_GROUP, series: bool = False):
        """Events per minute from the group's per-minute counters: published, acked and dead
        (dead-letter inflow) over the last minute and the last hour, the oldest ready message's
        due time, the pending messages already overdue by more than a second, and the live workers. One round trip (pipelined), O(60) per partition."""
        now_ms = yield from self._server_ms()
        parts = list((yield from self._partitions(topic)))
        fills = self._throughput_fills(topic, group, parts, now_ms)
        return self._rates((yield from self._pipeline(fills)), len(parts), now_ms, series=series)

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
        return {"deliveries": sum(counts), "p50_ms": _quantile(counts, 0.5), "p99_ms": _quantile(counts, 0.99),
                "buckets": counts}

    lateness = operation(_lateness)

    def _lateness_causes(self, topic: str, *, group: str = DEFAULT_GROUP, minutes: int = 60):
        """Late deliveries (more than 10 ms, and retries) per minute by cause over the last
        ``minutes`` (the current one included), oldest first: ``{"minutes": [epoch minute, ...],
        "causes": {cause: [count per minute]}}`` with every cause of LATENESS_CAUSES, summed over the
        partitions. One round trip, ``minutes`` x 7 fields per partition."""
        if not 1 <= minutes <= 60:
            raise InvalidArgument("minutes must be between 1 and 60 (the counters keep an hour)")
        now_ms = yield from self._server_ms()
        last = now_ms // 60_000
        span = range(last - minutes + 1, last + 1)
        fields = [f"{m}:cause:{c}" for m in span for c in LATENESS_CAUSES]
        keys = [self._group_keys(topic, group, p).minutes for p in (yield from self._partitions(topic))]
        causes = {c: [0] * minutes for c in LATENESS_CAUSES}
        for values in (yield from self._pipeline([lambda pipe, key=key: pipe.hmget(key, fields) for key in keys])):
            for i, v in enumerate(values):
                if v:
                    causes[LATENESS_CAUSES[i % len(LATENESS_CAUSES)]][i // len(LATENESS_CAUSES)] += int(v)
        return {"minutes": list(span), "causes": causes}

    lateness_causes = operation(_lateness_causes)

    def _minute_series(self, topic_groups: Sequence[tuple[str, str]], minutes: int = SERIES_MINUTES):
        """For each (topic, group), per minute over the last ``minutes`` (the oldest first, the
        current, partial minute last), summed over the partitions: published, acked and dead
        counts, and the claims' lateness (``deliveries``, ``p50_ms``, ``p99_ms``: as ``lateness``
        gives for one minute, None in a minute without deliveries), with ``first_minute`` (epoch
        minutes) and ``now_ms``. Cost: one pipelined round trip (one HMGET per partition of each
        group) after Redis's clock, however many groups; plus one for layouts not cached."""
        if not 1 <= minutes <= SERIES_MINUTES:
            raise InvalidArgument(f"minutes must be between 1 and {SERIES_MINUTES} (the counters keep an hour)")
        pairs, layouts = yield from self._many(topic_groups)
        now_ms = yield from self._server_ms()
        first = now_ms // 60_000 - minutes + 1
        nb = len(LATENESS_BOUNDS_MS) + 1
        per_minute = [*_RATE_EVENTS, *(f"late{b}" for b in range(nb))]
        fields = [f"{m}:{e}" for m in range(first, first + minutes) for e in per_minute]
        keys = [self._group_keys(topic, group, p).minutes
                for topic, group in pairs for p in range(layouts[topic].partitions)]
        replies = iter((yield from self._pipeline([lambda pipe, key=key: pipe.hmget(key, fields) for key in keys])))
        out = {}
        for topic, group in pairs:
            sums = [0] * len(fields)
            for _ in range(layouts[topic].partitions):
                for i, v in enumerate(next(replies)):
                    if v:
                        sums[i] += int(v)
            rows = [sums[m * len(per_minute):(m + 1) * len(per_minute)] for m in range(minutes)]
            late = [row[len(_RATE_EVENTS):] for row in rows]
            out[(topic, group)] = {
                "first_minute": first, "now_ms": now_ms,
                **{e: [row[n] for row in rows] for n, e in enumerate(_RATE_EVENTS)},
                "deliveries": [sum(b) for b in late],
                "p50_ms": [_quantile(b, 0.5) for b in late], "p99_ms": [_quantile(b, 0.99) for b in late]}
        return out

    minute_series = operation(_minute_series)

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

    def _summaries(self, topic_groups: Sequence[tuple[str, str]], *, series: bool = False):
        """For each (topic, group): its counts per state, throughput (as ``throughput``, acked and
        dead only: the pages show no publish rate), paused and ordered flags, for pages that show
        many groups at once. Three round trips in all however many groups (layouts, Redis's clock,
        one pipeline), instead of four per group; on a cluster client, one group at a time.
        ``series``: also the published counter, and ``per_minute``: {"published", "acked", "dead":
        60 counts each, the oldest minute first and the current (partial) one last}, read from the
        same HMGET of the minutes hash, so the sparklines cost the overview no round trip."""
        events = _RATE_EVENTS if series else _SUMMARY_EVENTS
        pairs, layouts = yield from self._many(topic_groups)
        if self.cluster:   # scripts in a cross-slot pipeline: keep to the per-group calls there
            out = {}
            for t, g in pairs:
                cfg = yield from self._group_config(t, g)
                rates = yield from self._throughput(t, group=g, series=series)
                out[(t, g)] = {"counts": (yield from self._counts(t, group=g)), **rates,
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
            rate_fills = self._throughput_fills(topic, group, parts, now_ms, events)
            fills += rate_fills
            plan.append((topic, group, len(parts), len(rate_fills)))
        replies = yield from self._pipeline(fills, [self.scripts.counts] * sum(n for _t, _g, n, _f in plan))
        out, i = {}, 0
        for topic, group, nparts, nfills in plan:
            counts = _sum_counts(replies[i:i + nparts])
            paused, ordered = (flag in (b"1", "1") for flag in replies[i + nparts])
            i += nparts + 1
            out[(topic, group)] = {"counts": counts,
                                   **self._rates(replies[i:i + nfills], nparts, now_ms, events, series=series),
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
                    due += [ready_due_ms(head[0][1])] if head else []
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
            due = [ready_due_ms(head[0][1]) for head in mine[1::3] if head]
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
    def _rates(replies: list, nparts: int, now_ms: int, events: tuple[str, ...] = _RATE_EVENTS, *,
               series: bool = False) -> dict:
        per_minute = {e: [0] * 61 for e in events}
        oldest = oldest_pending = None
        overdue = 0
        for n in range(nparts):
            values, head, pending_head, late = replies[4 * n: 4 * n + 4]
            for i, v in enumerate(values):
                if v:
                    per_minute[events[i % len(events)]][i // len(events)] += int(v)
            if head:
                due = ready_due_ms(head[0][1])
                oldest = due if oldest is None else min(oldest, due)
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
            counts = per_minute[e]
            out[f"{e}_last_minute"] = round(counts[-1] + counts[-2] * (1 - frac))
            out[f"{e}_last_hour"] = sum(counts[1:])
        if series:
            out["per_minute"] = {e: per_minute[e][-SERIES_MINUTES:] for e in events}
        return out


def _worker_info(group: str, worker_id: str, seen: dict, raw) -> WorkerInfo:
    """A WorkerInfo from what the heartbeats say; details that do not parse are left out, not
    raised: a page of workers must show the others."""
    try:
        d = json.loads(raw) if raw else {}
    except ValueError:
        d = {}
    if not isinstance(d, dict):
        d = {}

    def number(name: str) -> int | None:
        v = d.get(name)
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    def text(name: str) -> str | None:
        v = d.get(name)
        return v if isinstance(v, str) else None
    topics = d.get("topics")
    if not (isinstance(topics, list) and topics and all(isinstance(t, str) for t in topics)):
        topics = seen["topics"]
    return WorkerInfo(worker_id, group, tuple(topics), seen["beat"], host=text("host"), pid=number("pid"),
                      runtime=text("runtime"), concurrency=number("concurrency"), in_flight=number("in_flight"),
                      started_ms=number("started_ms"), version=text("version"))


def _quantile(buckets: list[int], q: float) -> float | None:
    """The upper bound (ms) of the lateness bucket the ``q`` quantile falls in (``inf`` above the
    last bound; None without deliveries)."""
    total = sum(buckets)
    if not total:
        return None
    seen = 0
    for bound, n in zip((*LATENESS_BOUNDS_MS, float("inf")), buckets, strict=True):
        seen += n
        if seen >= q * total:
            return bound
    return float("inf")


def _state_keys(k) -> list[str]:
    """The counts script's keys: one group's state sets in one partition, in ALL_STATES order."""
    return [k.state(s) for s in ALL_STATES]


def _sum_counts(replies) -> dict[MessageState, int]:
    """Per-state totals of the counts script's replies (one per partition)."""
    totals = dict.fromkeys(ALL_STATES, 0)
    for values in replies:
        for s, v in zip(ALL_STATES, values, strict=True):
            totals[s] += int(v)
    return totals


# Bookkeeping fields of the stats hash (claim_at, limit_at, limit_by: the facts of lateness.lua).
_NOT_COUNTERS = ("seq", "oseq", "minutes_pruned", "claim_at", "limit_at", "limit_by")
# (dispatch.lua keeps its rate buckets and fill cursor in fkst, not here: stats() sums this hash.)


def _sum_stats(raws) -> dict[str, int]:
    """Lifetime counters summed over the partitions' stats hashes."""
    totals: dict[str, int] = {}
    for raw in raws:
        for k, v in raw.items():
            name = as_text(k)
            if name not in _NOT_COUNTERS:
                totals[name] = totals.get(name, 0) + int(v)
    return totals
