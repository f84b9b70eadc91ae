"""The due load ahead of a group (the Forecast page) and spreading a backlog over a window (the
"spread" operation: its preview, its scope in words and its batches)."""

import math
from dataclasses import dataclass

from .bulk import fmt_ms
from .contracts import DEFAULT_GROUP, MessageState
from .engine import get_queue
from .messages import message_page
from .operations import BulkRun, walk

# The page's three views: (name, horizon s, bucket s). A week of minutes would be 10,080 bars.
VIEWS = {"hour": (3600, 60), "day": (86_400, 900), "week": (7 * 86_400, 3600)}
SPREAD_MAX_S = 7 * 86_400   # the longest window a spread takes (the forecast's week)


@dataclass(frozen=True)
class Peak:
    at_ms: int          # the bucket's start
    count: int          # due in it
    late_s: float       # the last of them is expected this late at the drain rate


@dataclass(frozen=True)
class LoadForecast:
    forecast: object        # queue_core.DueForecast
    rate: float             # acks per second the group has shown it can take (its busiest minute of the hour)
    last_minute: float      # acks per second over the last minute
    peaks: list[Peak]

    @property
    def capacity_per_bucket(self) -> float:
        return self.rate * self.forecast.bucket_ms / 1000


def load_forecast(topic: str, group: str = DEFAULT_GROUP, view: str = "hour") -> LoadForecast:
    """The due forecast of one of VIEWS with the group's drain rate and its three biggest peaks."""
    horizon, bucket = VIEWS[view]
    q = get_queue()
    forecast = q.due_forecast(topic, group=group, horizon=horizon, bucket=bucket, align=True)   # "09:00", not "09:03"
    acked = q.throughput(topic, group=group, series=True)["per_minute"]["acked"]
    rate = max(acked, default=0) / 60
    late = forecast.lateness(rate)
    peaks = [Peak(forecast.start_ms + i * forecast.bucket_ms, forecast.counts[i], late[i]) for i in forecast.peaks(3)]
    return LoadForecast(forecast, rate, (acked[-1] if acked else 0) / 60, peaks)


def peak_words(peak: Peak, rate: float, bucket_ms: int) -> str:
    """One peak in words: when, how many, and how late the last of them would be."""
    span = _span(bucket_ms)
    words = f"{fmt_ms(peak.at_ms)}: {_count(peak.count)} due in {span}"
    if rate <= 0:
        return words + "; no acks in the last hour, so no drain rate to judge it by"
    if math.isinf(peak.late_s) or peak.late_s < 1:
        return words + f"; at {_count(rate)}/s they are drained in time"
    return words + f"; at {_count(rate)}/s the last is ~{_duration(peak.late_s)} late"


def late_words(late_s: float) -> str:
    """Expected lateness in a table cell."""
    return "never drained (no acks in the last hour)" if math.isinf(late_s) else "on time" if late_s < 1 else \
        _duration(late_s)


def _span(ms: int) -> str:
    """A bucket's width in words: "one second", "one minute", "15 minutes", "one hour"."""
    for unit_ms, unit in ((3_600_000, "hour"), (60_000, "minute"), (1000, "second")):
        if ms >= unit_ms and ms % unit_ms == 0:
            n = ms // unit_ms
            return f"one {unit}" if n == 1 else f"{n} {unit}s"
    return f"{ms} ms"


def _count(n: float) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f} M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    return f"{n:,.0f}" if n >= 10 or n == int(n) else f"{n:.2g}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def spread_preview(topic: str, group: str = DEFAULT_GROUP, over_s: int = 600) -> dict:
    """What "spread every pending message over ``over_s`` seconds" would move now: the count
    (messages held behind an ordering key are not counted: their key's head moves), five samples
    (the soonest due) and the frozen scope; the due times start at confirmation, or just after the
    last one's due time if that is later (spreading never makes a message due earlier)."""
    count, last_ms = get_queue().spreadable(topic, group=group)
    samples, _ = message_page(topic, MessageState.pending, after=None, limit=5, group=group)
    scope = {"group": group, "state": MessageState.pending.value, "cutoff_ms": last_ms or 0, "over_ms": over_s * 1000}
    return {"count": count, "samples": samples, "scope": scope}


def spread_problem(topic: str, scope: dict) -> str:
    """Why the window cannot be used, or "": its end must be within the topic's max_delay (the
    engine refuses a later due time message by message)."""
    q = get_queue()
    now = q.server_ms()
    end_s = (max(now, scope["cutoff_ms"] + 1) + scope["over_ms"] - now) / 1000
    max_delay = q.topic_config(topic).max_delay
    if end_s > max_delay:
        return (f"the window would end {_duration(end_s)} from now, beyond {topic}'s max_delay of "
                f"{_duration(max_delay)}: choose a shorter window")
    return ""


def spread_start(topic: str, scope: dict) -> dict:
    """The scope as confirmed, with the count now (the window's slots) and its start: now by
    Redis's clock, or just after the last due time in scope, whichever is later, so the walk (in
    due order, up to the cutoff) never meets a message it already moved and no message becomes
    due earlier than it was."""
    q = get_queue()
    count, _ = q.spreadable(topic, group=scope["group"])
    return {**scope, "count": count, "start_ms": max(q.server_ms(), scope["cutoff_ms"] + 1)}


def spread_words(topic: str, scope: dict) -> str:
    start = (f"from {fmt_ms(scope['start_ms'])}" if scope.get("start_ms") else
             "from the moment it is confirmed (or just after the last one's due time, if later)")
    return (f"every pending message of group {scope.get('group', DEFAULT_GROUP)} in {topic} due by "
            f"{fmt_ms(scope['cutoff_ms'])}, in due order, spaced evenly over {_duration(scope['over_ms'] / 1000)} "
            f"{start}")


def spread_batch(topic: str, scope: dict, run: BulkRun) -> tuple[int, int]:
    """One batch of a spread: the next pending messages in due order (up to the cutoff), each
    given the next slot of the window. ``run.placed`` counts the slots given (a resumed run
    starts at what earlier runs moved); messages that arrived after the confirmation with an
    earlier due time widen the window by a slot each rather than crowd it."""
    def spread(q, ids, state, group):
        slots = max(scope.get("count") or 0, run.placed + len(ids))
        codes = q.spread(topic, ids, scope["over_ms"] / 1000, start_ms=scope["start_ms"], slot=run.placed,
                         slots=slots, actor=run.actor, group=group, states=[state])
        run.placed += len(ids)
        return codes

    return walk(topic, scope, run, spread)
