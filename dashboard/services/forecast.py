"""The due load ahead of a group (the Forecast page) and spreading a backlog over a window (the
"spread" operation: its preview, its scope in words and its batches)."""

import math
from dataclasses import dataclass

from .bulk import fmt_ms
from .contracts import DEFAULT_GROUP, MessageState, position_cursor
from .engine import get_queue
from .messages import message_page
from .operations import BulkRun

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
    workers: int = 0        # workers with a heartbeat in the last 30 s (none: nothing drains now)
    paused: bool = False    # the group is paused: nothing is claimed until it is resumed

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
    return LoadForecast(forecast, rate, (acked[-1] if acked else 0) / 60, peaks,
                        workers=len(q.workers(topic, group=group)), paused=q.group_config(topic, group).paused)


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
    """What "spread the pending messages due in the next ``over_s`` seconds over that window"
    would move now: the count (messages held behind an ordering key are not counted: their key's
    head moves), five samples (the soonest due) and the scope. The window is fixed at confirmation
    (spread_start): it starts then, by Redis's clock, and only messages due by its end move."""
    q = get_queue()
    over_ms = over_s * 1000
    cutoff_ms = q.server_ms() + over_ms
    count, _ = q.spreadable(topic, group=group, until_ms=cutoff_ms)
    samples, _ = message_page(topic, MessageState.pending, after=None, limit=5, group=group)
    scope = {"group": group, "state": MessageState.pending.value, "cutoff_ms": cutoff_ms, "over_ms": over_ms}
    return {"count": count, "samples": [m for m in samples if _score(m) <= cutoff_ms], "scope": scope}


def spread_problem(topic: str, scope: dict) -> str:
    """Why the window cannot be used, or "": its end must be within the topic's max_delay (the
    engine refuses a later due time message by message). Checked on the preview and again at
    confirmation."""
    end_s = scope["over_ms"] / 1000
    max_delay = get_queue().topic_config(topic).max_delay
    if end_s > max_delay:
        return (f"the window would end {_duration(end_s)} from now, beyond {topic}'s max_delay of "
                f"{_duration(max_delay)}: choose a shorter window")
    return ""


def spread_start(topic: str, scope: dict) -> dict:
    """The scope as confirmed: the window starts now by Redis's clock and ends ``over_ms`` later;
    the messages due by its end are counted now (the window's slots, and the operation's size)."""
    q = get_queue()
    start_ms = q.server_ms()
    cutoff_ms = start_ms + scope["over_ms"]
    count, _ = q.spreadable(topic, group=scope["group"], until_ms=cutoff_ms)
    return {**scope, "count": count, "start_ms": start_ms, "cutoff_ms": cutoff_ms}


def spread_words(topic: str, scope: dict) -> str:
    window = (f"from {fmt_ms(scope['start_ms'])} to {fmt_ms(scope['cutoff_ms'])}" if scope.get("start_ms") else
              "starting when it is confirmed")
    return (f"every pending message of group {scope.get('group', DEFAULT_GROUP)} in {topic} due within the "
            f"window, spaced evenly in due order over {_duration(scope['over_ms'] / 1000)} {window}; a message "
            "whose slot is earlier than its own due time keeps its own (none becomes due earlier), and messages "
            "due after the window are left alone")


def spread_batch(topic: str, scope: dict, run: BulkRun) -> tuple[int, int]:
    """One batch of a spread: the next pending messages due by the window's end, walked from the
    end down (newest due first), so a message moved later never comes under the walk again. A
    message's slot is its rank in due order among the messages due by the window's end that are
    left below it, so a resumed run needs no count of what was placed and never gives a slot
    twice; each message becomes due at max(its slot, its own due time). Messages published after
    the confirmation with a due time in the window widen it by a slot each rather than crowd it."""
    q = get_queue()
    group = scope.get("group", DEFAULT_GROUP)
    after = run.after or position_cursor(scope["cutoff_ms"] + 1, "")   # the first page starts at the end
    page = q.page(topic, MessageState.pending, limit=run.size, after=after, group=group, reverse=True)
    movable = [m for m in page.messages if m.due_at is not None]
    run.after = page.next_cursor
    if not movable:
        run.after = None
        return len(page.messages), 0
    movable.reverse()                                                   # due order
    lowest = _score(movable[0])
    below, _ = q.spreadable(topic, group=group, until_ms=lowest)
    rank = below - sum(1 for m in movable if _score(m) == lowest)     # ties at `lowest` left below come first
    slots = max(scope.get("count") or 0, rank + len(movable))
    codes = q.spread(topic, [m.id for m in movable], scope["over_ms"] / 1000, start_ms=scope["start_ms"], slot=rank,
                     slots=slots, actor=run.actor, group=group, states=[MessageState.pending],
                     not_before=[_score(m) for m in movable])
    return len(page.messages), sum(1 for c in codes if c == 0)


def _score(message) -> int:
    return round(message.due_at.timestamp() * 1000)
