import time
from datetime import UTC, datetime

from django import template

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
def ms_time(ms) -> str:
    """Epoch ms -> '2026-11-22 04:40:15.123 UTC (in 5.0 s)'."""
    if ms in (None, ""):
        return "—"
    ms = float(ms)
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return f"{dt:%Y-%m-%d %H:%M:%S}.{int(ms % 1000):03d} UTC ({_relative(ms / 1000 - time.time())})"


@register.filter
def dt_time(dt) -> str:
    return ms_time(dt.timestamp() * 1000) if dt else "—"
