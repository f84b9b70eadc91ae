"""The due load ahead and how to flatten it: ``due_forecast`` (how many messages fall due in each
bucket of the next hour, day or week: lua/due_forecast.lua, bounded runs of ZCOUNTs) and ``spread`` (give many
messages due times spaced evenly over a window: lua/reschedule.lua with a due time per id)."""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import InvalidArgument
from ..keys import DEFAULT_GROUP, HELD_BASE
from ..states import MessageState
from ..steps import operation, pipeline
from .base import as_seconds
from .operate import Operate

MAX_FORECAST_BUCKETS = 10_080   # a week of minutes: one ZCOUNT per bucket per partition and state
FORECAST_BUCKETS_PER_CALL = 256   # lua/due_forecast.lua caps a call at 1,024; 256 keep a call near 2 ms at 10 M members (bench.forecast)
FORECAST_STATES = (MessageState.pending, MessageState.retrying)   # what falls due (the others are due already)


@dataclass(frozen=True, slots=True)
class DueForecast:
    """Messages of one group falling due, per bucket, from ``start_ms`` (Redis's clock at the read):
    ``counts[i]`` fall due in [start_ms + i * bucket_ms, start_ms + (i + 1) * bucket_ms)."""

    start_ms: int
    bucket_ms: int
    counts: list[int]
    overdue: int   # due before start_ms and not yet ready: a backlog waiting for its promotion
    later: int     # due after the horizon
    held: int      # behind an ordering key or a parent (after=): due when the one before them is done

    @property
    def total(self) -> int:
        return self.overdue + sum(self.counts) + self.later + self.held

    def lateness(self, rate: float) -> list[float]:
        """Seconds the last message due in each bucket is expected to wait at a drain rate of
        ``rate`` messages per second: what is left over from one bucket carries into the next
        (the overdue backlog is there at the start). Infinite with no drain."""
        if rate <= 0:
            return [math.inf if self.overdue or any(self.counts[:i + 1]) else 0.0 for i in range(len(self.counts))]
        per_bucket, carry, out = rate * self.bucket_ms / 1000, float(self.overdue), []
        for n in self.counts:
            carry = max(0.0, carry + n - per_bucket)
            out.append(carry / rate)
        return out

    def peaks(self, n: int = 3) -> list[int]:
        """The indexes of the ``n`` fullest buckets (ties: the earlier first), in time order."""
        ranked = sorted((i for i, c in enumerate(self.counts) if c), key=lambda i: (-self.counts[i], i))
        return sorted(ranked[:n])


class Forecast(Operate):
    """The due load ahead of a group, and spreading a backlog over a window."""

    def _due_forecast(self, topic: str, *, group: str = DEFAULT_GROUP, horizon: float = 3600, bucket: float = 60,
                      states: Sequence[MessageState] = FORECAST_STATES, align: bool = False):
        """How many pending and retrying messages of ``group`` fall due in each ``bucket`` seconds
        of the next ``horizon`` seconds, by Redis's clock: a DueForecast. One round trip for Redis's
        clock, one for each set's size, then one for the non-empty sets' runs of buckets: a script call
        per 256 buckets of a set (lua/due_forecast.lua: one ZCOUNT per bucket edge, each
        O(log n), so the cost grows with the buckets, not the messages; Redis serves others between
        the calls). A run's buckets are one snapshot; runs read a moment apart may each see a
        message the other saw leave. More than 10,080 buckets is refused.
        ``align=True`` starts the buckets on a whole multiple of ``bucket`` since 1970 (UTC: minutes
        at :00, hours on the hour), so the first one is partly past and counts what fell due in it
        and is not yet ready; a chart then reads "09:00", not "09:03:17"."""
        bucket_ms = round(as_seconds(bucket, "bucket") * 1000)
        horizon_ms = round(as_seconds(horizon, "horizon") * 1000)
        if bucket_ms < 1 or horizon_ms < bucket_ms:
            raise InvalidArgument(f"bucket must be at least 1 ms and horizon at least one bucket (got bucket={bucket!r}, "
                                  f"horizon={horizon!r} seconds)")
        n = math.ceil(horizon_ms / bucket_ms)
        if n > MAX_FORECAST_BUCKETS:
            raise InvalidArgument(f"horizon {horizon!r} s in buckets of {bucket!r} s is {n:,} buckets; at most "
                                  f"{MAX_FORECAST_BUCKETS:,} (a week of minutes) are read at once: choose larger buckets")
        states = [MessageState(s) for s in states]
        partitions = (yield from self._layout(topic)).partitions
        sets = [(p, s) for p in range(partitions) for s in states]

        def sizes(pipe):   # which sets hold anything (a retrying set is mostly empty)
            for p, s in sets:
                pipe.zcard(self._group_keys(topic, group, p).state(s))
        start = yield from self._server_ms()   # not in the pipeline: a cluster's pipeline refuses TIME
        cards = yield pipeline(sizes)
        if align:
            start -= start % bucket_ms
        calls = []   # (keys, args): each a run of at most FORECAST_BUCKETS_PER_CALL buckets of one set
        for (p, s), card in zip(sets, cards, strict=True):
            if not card:
                continue
            keys = self._group_keys(topic, group, p).as_list()
            for first in range(0, n, FORECAST_BUCKETS_PER_CALL):
                run = min(FORECAST_BUCKETS_PER_CALL, n - first)
                calls.append((keys, [s.value, start + first * bucket_ms, bucket_ms, run,
                                     "1" if first + run == n else ""]))
        counts, overdue, later, held = [0] * n, 0, 0, 0
        runs = (yield from self._run_many(self.scripts.due_forecast, calls)) if calls else []
        for (_keys, args), below in zip(calls, runs, strict=True):
            first = (args[1] - start) // bucket_ms
            if first == 0:
                overdue += below[0]
            for i in range(args[3]):   # neighbouring edges of one call: one snapshot, never negative
                counts[first + i] += below[i + 1] - below[i]
            if args[4]:
                later += below[-2] - below[-3]
                held += below[-1] - below[-2]
        return DueForecast(start, bucket_ms, counts, overdue, later, held)

    due_forecast = operation(_due_forecast)

    def _spread(self, topic: str, ids: Iterable[str], over: float = 600, *, start_ms: int | None = None,
                slot: int = 0, slots: int | None = None, actor: str | None = None, group: str = DEFAULT_GROUP,
                states: Iterable[MessageState] = (MessageState.pending,), not_before: Sequence[int] | None = None):
        """Give ``ids`` due times spaced evenly over ``over`` seconds from ``start_ms`` (Redis ms;
        default Redis's clock now): the window holds ``slots`` evenly spaced due times (default one
        per id) and ``ids[k]`` takes slot ``slot + k``, so a backlog spread in batches keeps one
        spacing. Compare-and-set on ``states``, as reschedule_many, with one code per id (0 moved,
        Code.NOT_FOUND, Code.STATE_CONFLICT, Code.DELAY_TOO_LONG). A slot already past is due now
        (never earlier than Redis's clock). A message held behind its ordering key is refused: its
        key's head moves and the key follows it in order. ``not_before`` (Redis ms, one per id, as
        their due times now) keeps a message whose slot is earlier than that at its own time, and the
        script then never moves one earlier than its due time as it is at the move (a publish or
        reschedule between the caller's read and the move is not undone)."""
        ids = list(ids)
        slots = len(ids) if slots is None else slots
        over_ms = round(as_seconds(over, "over") * 1000)
        if slot < 0 or slots < slot + len(ids):
            raise InvalidArgument(f"slots {slot}..{slot + len(ids) - 1} do not fit a window of {slots} slot(s)")
        if not ids:
            return []
        if start_ms is None:
            start_ms = yield from self._server_ms()
        dues = [start_ms + (slot + k) * over_ms // slots for k in range(len(ids))]
        if not_before is not None:
            if len(not_before) != len(ids):
                raise InvalidArgument(f"not_before holds {len(not_before)} due time(s) for {len(ids)} id(s)")
            dues = [max(due, int(t)) for due, t in zip(dues, not_before, strict=True)]
        allowed = ",".join(MessageState(s).value for s in states)
        mode = "each" if not_before is None else "later"   # later: never before its due time at the move
        return (yield from self._per_id(self.scripts.reschedule, topic, group,
                                        [actor or self.actor, group, mode, allowed], ids, each=dues))

    spread = operation(_spread)

    def _spreadable(self, topic: str, *, group: str = DEFAULT_GROUP, state: MessageState = MessageState.pending,
                    until_ms: int | None = None):
        """(how many messages of ``state`` in ``group`` have a due time, up to ``until_ms`` if
        given, the latest of those due times in Redis ms or None): what spreading that state over
        a window ending at ``until_ms`` would move. Messages held behind an ordering key or a
        parent are not counted (their turn comes from the message before them). One round trip."""
        partitions = (yield from self._layout(topic)).partitions
        state = MessageState(state)
        top = f"({HELD_BASE}" if until_ms is None or until_ms >= HELD_BASE else int(until_ms)

        def fill(pipe):
            for p in range(partitions):
                key = self._group_keys(topic, group, p).state(state)
                pipe.zcount(key, "-inf", top)
                pipe.zrevrangebyscore(key, top, "-inf", start=0, num=1, withscores=True)
        replies = yield pipeline(fill)
        count = sum(replies[0::2])
        lasts = [int(last[0][1]) for last in replies[1::2] if last]
        return count, max(lasts) if lasts else None

    spreadable = operation(_spreadable)
