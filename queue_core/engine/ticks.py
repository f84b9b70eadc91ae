"""Ticks: ``tick_schedule`` and ``tick_schedules`` (the schedulers' calls), ``run_schedule_now``
(lua/schedule_tick.lua, which publishes through publish.lua's own body) and ``backfill_schedule``
(plain publishes of a past range, keyed like ticks).

The caller computes the fire times that follow the stored next tick (queue_core.cron); the script
decides by Redis ``TIME`` which of them fires, compare-and-set on the stored next tick, so any
number of callers may race: one fires, none doubles."""

import json
from dataclasses import dataclass
from datetime import datetime

from ..cron import Timing
from ..errors import Code, DuplicateMessage, InvalidArgument, QueueError, raise_for_code
from ..ids import new_ids
from ..indexes import capped, declared, entries_blob, entries_text, hashes_of, parse_json
from ..keys import DEFAULT_GROUP, id_for_partition
from ..scripts import NO_TIME
from ..steps import operation, pipeline, script
from .base import as_text
from .publish import Publish
from .schedules import Schedules, _ms, _timing

FOLLOWING = 16             # fire times passed to each tick call after the stored next one
SKIP_MARGIN_MS = 1000      # the client skips ticks only this far beyond the catch-up window (the script decides the rest)
SKIP_CAP = 100_000         # cron ticks counted per call when skipping a long outage (intervals are counted at once)
BACKFILL_LIMIT = 1000     # ticks per backfill call


@dataclass(frozen=True)
class Backfill:
    """What a backfill covered: the ticks in the range, the ids published, the ids of ticks whose
    message was still there (not published again), and for a ``partial`` call the first tick of
    the range it did not reach (None when it covered the rest of the range)."""

    ticks: list[int]
    published: list[str]
    existing: list[str]
    rest_ms: int | None = None


@dataclass(frozen=True)
class TickResult:
    """What one ``tick_schedule`` call did (lua/schedule_tick.lua lists the outcomes)."""

    outcome: str
    tick_ms: int
    message_id: str | None
    next_ms: int | None
    missed: int


class Ticks(Schedules, Publish):
    """tick_schedule, tick_schedules, run_schedule_now, backfill_schedule."""

    def _run_schedule_now(self, name: str, actor: str | None = None):
        """Publish one tick of ``name`` now (also when paused), with the dedup key
        ``schedule:<name>:now:<ms>``; the regular ticks are unchanged. Returns the message id."""
        topic, p = yield from self._home(name)
        result = yield from self._tick(name, topic, p, "now", actor)
        return result.message_id

    run_schedule_now = operation(_run_schedule_now)

    def _tick_schedule(self, name: str, topic: str | None = None, partition: int | None = None,
                       actor: str | None = None):
        """Fire ``name``'s due tick if there is one; any number of callers may race. Returns a
        TickResult. Two round trips (three without the home): read, then the script."""
        if topic is None or partition is None:
            topic, partition = yield from self._home(name)
        pk = self._schedule_keys(topic, partition)
        raw, nxt, (sec, usec) = yield pipeline(lambda pipe: (pipe.hget(pk.schedules, name),
                                                             pipe.hget(pk.schedule_runs, f"{name}|next"), pipe.time()))
        if raw is None or nxt is None:
            return TickResult("gone" if raw is None else "idle", 0, None, None, 0)
        [result] = yield from self._tick_schedules([Due(name, topic, partition, int(nxt), raw)],
                                                   sec * 1000 + usec // 1000, actor)
        if result.outcome == "refused":
            raise_for_code(result.tick_ms, topic, f"a tick of schedule {name!r}")
        return result

    tick_schedule = operation(_tick_schedule)

    def _tick_schedules(self, due: list["Due"], now_ms: int, actor: str | None = None):
        """Fire the ticks of many schedules believed due: one script call each, all in one
        pipelined round trip (one after another on a cluster). ``now_ms`` is Redis's clock as the
        caller estimates it; it only decides which ticks of a long outage to skip before the call
        (with a second's margin: the script checks each by its own TIME). Returns a TickResult per
        entry, in order; 'refused' carries publish's refusal code in ``tick_ms``."""
        layouts = yield from self._layouts_of([d.topic for d in due])
        payloads = yield from self._indexed_payloads([(d.name, d.topic, d.partition) for d in due], layouts)
        calls = [self._tick_call(d.name, d.topic, d.partition, layouts[d.topic], "tick", d.next_ms, d.definition,
                                 now_ms, actor, payloads.get(d.name)) for d in due]
        replies = yield from self._run_many(self.scripts.schedule_tick, calls)
        results = []
        for d, reply in zip(due, replies, strict=True):
            result = _result(reply)
            if result.outcome == "refused" and result.tick_ms == Code.STALE_LAYOUT:
                self._layouts.drop(d.topic)
                result = TickResult("stale", 0, None, d.next_ms, 0)   # routed by an old layout: ask again
            results.append(result)
        return results

    tick_schedules = operation(_tick_schedules)

    def _timing_of(self, raw: bytes) -> tuple[Timing, int]:
        cache = self.__dict__.setdefault("_timings", {})
        hit = cache.get(raw)
        if hit is None:
            d = json.loads(raw)
            hit = (_timing(d.get("cron"), d.get("tz", "UTC"), d.get("every"), d.get("start_ms", 0), d.get("end_ms", 0)),
                   d["catchup_ms"])
            if len(cache) > 4096:
                cache.clear()
            cache[raw] = hit
        return hit

    def _indexed_payloads(self, homes, layouts):
        """{name: (payload, headers)} of the schedules whose topics declare indexed fields (their
        ticks' index entries are computed from them); one pipelined read, none without indexes."""
        wanted = [(n, t, p) for n, t, p in homes if declared(layouts[t])]
        if not wanted:
            return {}

        def fill(pipe):
            for n, t, p in wanted:
                pipe.hmget(self._schedule_keys(t, p).schedules, n, f"{n}|payload")
        out = {}
        for (n, _t, _p), (raw, payload) in zip(wanted, (yield pipeline(fill)), strict=True):
            if raw is not None:
                d = json.loads(raw)
                headers = parse_json(d["headers"]) if d.get("headers") else {}
                out[n] = (payload or b"", {**_as_lua_writes(headers or {}), "delayq-schedule": n})
        return out

    def _tick_call(self, name, topic, p, layout, mode, nxt, raw, now_ms, actor, indexed=None):
        """(keys, args) of one schedule_tick call: the fire times after ``nxt`` (the ones of a long
        outage skipped and counted), a fresh message id for the schedule's partition, and the tick
        message's index entries (``indexed``: the schedule's payload and headers) when the topic
        declares indexed fields."""
        skipped, last_skipped, following, more = 0, 0, [], False
        if mode == "tick":
            timing, catchup_ms = self._timing_of(raw)
            after = nxt
            oldest = now_ms - catchup_ms - SKIP_MARGIN_MS
            if nxt < oldest:
                skipped, last_skipped, after = _skip(timing, nxt, oldest)
            for t in timing.times(after):
                following.append(t)
                if len(following) == FOLLOWING:
                    more = True
                    break
        block = layout.groups.index(DEFAULT_GROUP) + 1 if DEFAULT_GROUP in layout.groups else 0
        msg_id = id_for_partition(new_ids(1)[0], p)
        fields = declared(layout)
        blob = entries_blob([msg_id], [hashes_of(capped(entries_text(fields, *indexed)))]) if fields and indexed else ""
        args = [name, mode, nxt, layout.signature, msg_id, block, skipped, last_skipped, actor or self.actor,
                "1" if more else "0", layout.indexes, blob, *following]
        return self._publish_keys(topic, layout, p), args

    def _tick(self, name, topic, p, mode, actor):
        """One schedule_tick call outside the scheduler (run now), retried on a changed layout."""
        for attempt in range(3):
            layout = yield from self._layout(topic, fresh=attempt > 0)
            indexed = (yield from self._indexed_payloads([(name, topic, p)], {topic: layout})).get(name)
            keys, args = self._tick_call(name, topic, p, layout, mode, 0, None, 0, actor, indexed)
            result = _result((yield script(self.scripts.schedule_tick, keys, args)))
            if result.outcome == "refused":
                if result.tick_ms == Code.STALE_LAYOUT:
                    self._layouts.drop(topic)
                    continue
                raise_for_code(result.tick_ms, topic, f"a tick of schedule {name!r}")
            return result
        raise QueueError(f"topic {topic!r} changed its layout three times during a tick of schedule {name!r}; "
                         "try again")

    def _backfill_schedule(self, name: str, start: datetime, end: datetime, *, dry_run: bool = False,
                           limit: int = BACKFILL_LIMIT, partial: bool = False, actor: str | None = None):
        """Publish the ticks of ``name`` whose fire times fall in [start, end] (both aware, ``end``
        not after now), each with the key ``schedule:<name>:<tick>`` and the header
        ``delayq-backfill: 1``; a tick whose message still exists is not published again. At most
        ``limit`` ticks: a larger range is refused (narrow it), or with ``partial`` its first
        ``limit`` ticks are taken and ``rest_ms`` says where the rest start (a caller walks a long
        range this way, as the dashboard's backfill operation does). ``dry_run``: only list them.
        Returns a Backfill. One publish per tick (the schedule's counters are not changed)."""
        start_ms, end_ms = _ms(start, "start"), _ms(end, "end")
        if not start_ms or not end_ms or end_ms < start_ms:
            raise InvalidArgument("give start and end (aware datetimes), end not before start")
        if not isinstance(limit, int) or not 1 <= limit <= BACKFILL_LIMIT:
            raise InvalidArgument(f"limit must be between 1 and {BACKFILL_LIMIT}")
        now = yield from self._server_ms()
        if end_ms > now:
            raise InvalidArgument("end is in the future: backfill fills past ticks (the schedulers fire the next ones)")
        s = yield from self._schedule(name)
        ticks, rest = [], None
        for t in s.timing.times(start_ms - 1):
            if t > end_ms:
                break
            if len(ticks) == limit:
                if not partial:
                    raise InvalidArgument(f"the range holds more than {limit} ticks of {name!r}; narrow it")
                rest = t
                break
            ticks.append(t)
        if dry_run:
            return Backfill(ticks, [], [], rest)
        published, existing = [], []
        for t in ticks:
            headers = {**(s.headers or {}), "delayq-schedule": name, "delayq-tick": str(t), "delayq-backfill": "1"}
            try:
                published.append((yield from self._publish_one(
                    s.topic, s.payload, key=f"schedule:{name}:{t}", headers=headers, strict=True,
                    max_attempts=s.max_attempts, actor=actor, partition=s.partition)))
            except DuplicateMessage as exc:
                existing.append(exc.existing_id)
        return Backfill(ticks, published, existing, rest)

    backfill_schedule = operation(_backfill_schedule)


@dataclass(frozen=True)
class Due:
    """A tick a scheduler believes due: the schedule, its home, the next tick it last saw (the
    script's compare-and-set value) and its stored definition (for the fire times that follow)."""

    name: str
    topic: str
    partition: int
    next_ms: int
    definition: bytes


def _result(reply) -> TickResult:
    next_ms = int(reply[3])
    return TickResult(as_text(reply[0]), int(reply[1]), as_text(reply[2]) or None,
                      None if next_ms == NO_TIME else next_ms,
                      int(reply[4]))


def _skip(timing: Timing, nxt: int, oldest: int) -> tuple[int, int, int]:
    """Ticks after ``nxt`` older than ``oldest`` (a scheduler was away): (how many, the last of
    them, where the listing resumes). Intervals are counted at once; cron ticks one by one, at
    most SKIP_CAP per call (the rest on the next call)."""
    if timing.cron is None:
        last = timing.next_after(oldest - timing.every_ms - 1)   # the last tick before oldest, or oldest
        if last is not None and last >= oldest:
            last -= timing.every_ms
        if last is None or last <= nxt:
            return 0, 0, nxt
        return (last - nxt) // timing.every_ms, last, last
    count, last = 0, 0
    for t in timing.times(nxt):
        if t >= oldest or count == SKIP_CAP:
            break
        count, last = count + 1, t
    return count, last, (last if count else nxt)


def _as_lua_writes(value):
    """A tick's headers as schedule_tick.lua stores them: it decodes the schedule's headers and
    encodes them again with cjson, which writes a number with 14 significant digits (0.1 + 0.2
    becomes 0.3), so their index entries are computed from those numbers (a review found
    header.v:0.3 missed such a tick)."""
    if isinstance(value, dict):
        return {k: _as_lua_writes(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_lua_writes(v) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(format(float(value), ".14g"))
        except OverflowError:
            return value
    return value
