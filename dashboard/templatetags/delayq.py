"""Every time on every page in one format, UTC with the zone named, inside <time datetime=...> so
delayq.js can rewrite it to the browser's zone when the operator turns local time on."""

import time
from datetime import UTC, datetime

from django import template
from django.utils.html import format_html

register = template.Library()


def _relative(delta_s: float) -> str:
    future = delta_s > 0
    s = abs(delta_s)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if s >= size or unit == "s":
            text = f"{s / size:.0f} {unit}" if unit != "s" else f"{s:.1f} s"
            return f"in {text}" if future else f"{text} ago"
    return ""


@register.filter
def ms_time(ms, style: str = "") -> str:
    """Epoch ms -> '<time datetime="2026-11-22T04:40:15.123Z">2026-11-22 04:40:15.123 UTC</time>
    (in 5.0 s)'; style "plain" leaves out the relative part (tables of past events, ranges)."""
    if ms in (None, ""):
        return "—"
    ms = float(ms)
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    stamp = f"{dt:%Y-%m-%d %H:%M:%S}.{int(ms % 1000):03d}"
    shown = format_html('<time datetime="{}Z">{} UTC</time>', stamp.replace(" ", "T"), stamp)
    if style == "plain":
        return shown
    return format_html("{} <span class=\"relative\">({})</span>", shown, _relative(ms / 1000 - time.time()))


@register.filter
def dt_time(dt, style: str = "") -> str:
    return ms_time(dt.timestamp() * 1000, style) if dt else "—"


@register.filter
def attempts_words(attempts, limit) -> str:
    """How often a message was tried, against its limit: "attempt 0 of 4" read as if it had
    failed once already."""
    attempts, limit = int(attempts or 0), int(limit or 0)
    up_to = f"up to {limit} attempt{'s' if limit != 1 else ''}" if limit else "no attempt limit"
    if not attempts:
        return f"not tried yet, {up_to}"
    return f"tried {attempts} time{'s' if attempts != 1 else ''}, {up_to}"


# Why a delivery was late (queue_core's LATENESS_CAUSES), in words that finish "late 2.3 s: ...";
# key_held's words end where the page links the holder.
LATENESS_WORDS = {
    "key_held": "the ordering key was held by",
    "paused": "the group was paused",
    "rate_limited": "the group's rate limit held it",
    "concurrency_limited": "the in-flight limit held it (the workers had as many messages as it allows)",
    "saturated": ("the workers were busy: messages in flight, or a claim after its due time took earlier "
                  "ones"),
    "no_worker": "no worker was claiming",
    "retry_backoff": "it waited out a retry backoff after a failed attempt (claimed when the backoff ended)",
}


@register.filter
def lateness_words(cause) -> str:
    return LATENESS_WORDS.get(cause, cause or "")


@register.filter
def late_amount(ms) -> str:
    """A lateness as a page says it: "45 ms", "2.3 s", "4.0 min"."""
    ms = int(ms or 0)
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


@register.filter
def short_id(msg_id) -> str:
    """A message id short enough for a list row: its last 8 characters (a ULID's first ten are its
    millisecond, shared by a burst; the tail tells them apart), the full id in the link's title."""
    msg_id = str(msg_id or "")
    return "…" + msg_id[-8:] if len(msg_id) > 12 else msg_id


@register.filter
def seconds_words(seconds) -> str:
    """A duration ahead as a page says it: "45 s", "12 min", "5.2 h", "3.1 days"; "—" for none."""
    if seconds is None:
        return "—"
    s = float(seconds)
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    if s < 172_800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86_400:.1f} days"


# Seconds from now, and their words: the reschedules operators reach for.
RESCHEDULE_PRESETS = ((300, "+5 min"), (3600, "+1 h"), (86400, "+1 d"))


@register.simple_tag
def reschedule_presets():
    return RESCHEDULE_PRESETS

