"""Server-side SVG charts: no JavaScript, no CDN, readable in light and dark mode (colours are
CSS variables, set per series class in dashboard.css). Every chart on a page also has its numbers
in a table next to it, so nothing depends on reading a plot.
"""

from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from .services.contracts import LATENESS_BOUNDS_MS, LATENESS_CAUSES

WIDTH, HEIGHT = 720, 220
PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 56, 12, 12, 28


@dataclass(frozen=True)
class Series:
    label: str
    values: list[float | None]    # one per x; None = no data (a gap in the line)


def nice_max(value: float) -> float:
    """The smallest 1/2/5 x 10^n at or above ``value`` (a readable top for the y axis)."""
    if value <= 0:
        return 1.0
    scale = 10 ** (len(str(int(value))) - 1) if value >= 1 else 1.0
    while scale > value:
        scale /= 10
    for step in (1, 2, 5, 10):
        if step * scale >= value:
            return step * scale
    return 10 * scale


def _fmt(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value:g} %"
    if unit == "ms" and value >= 1_000:   # "5 s", not "5kms"
        return _fmt(value / 1_000, "s")
    if unit == "s" and value >= 3_600:
        return f"{value / 3_600:.3g} h"
    if unit == "s" and value >= 60:
        return f"{value / 60:.3g} min"
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M{unit}"
    if value >= 1_000:
        return f"{value / 1_000:g}k{unit}"
    return f"{value:g}{unit and ' ' + unit}"


def line_chart(xs: list[datetime], series: list[Series], *, title: str, unit: str = "") -> SafeString:
    """A line per series over the time axis ``xs``; gaps where a value is None."""
    present = [v for s in series for v in s.values if v is not None]
    if not xs or not present:
        return format_html('<p class="empty">{}: no data in this range.</p>', title)
    top = nice_max(max(present))
    plot_w, plot_h = WIDTH - PAD_LEFT - PAD_RIGHT, HEIGHT - PAD_TOP - PAD_BOTTOM

    def x(i):
        return PAD_LEFT + (plot_w * i / (len(xs) - 1) if len(xs) > 1 else plot_w / 2)

    def y(v):
        return PAD_TOP + plot_h * (1 - v / top)

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
             f"<title>{escape(title)}</title>"]
    for k in range(5):   # horizontal grid and y labels
        value = top * k / 4
        parts.append(f'<line class="grid" x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{y(value):.1f}" '
                     f'y2="{y(value):.1f}"/><text class="axis" x="{PAD_LEFT - 6}" y="{y(value) + 4:.1f}" '
                     f'text-anchor="end">{escape(_fmt(value, unit))}</text>')
    ticks = sorted({0, len(xs) - 1, *(round(i * (len(xs) - 1) / 4) for i in range(1, 4))})
    for i in ticks:
        label = xs[i].strftime("%m-%d %H:%M")
        anchor = "start" if i == 0 else "end" if i == len(xs) - 1 else "middle"   # edge labels stay inside
        parts.append(f'<text class="axis" x="{x(i):.1f}" y="{HEIGHT - 8}" text-anchor="{anchor}">{label}</text>')
    for n, s in enumerate(series):
        runs, current = [], []
        for i, v in enumerate(s.values):
            if v is None:
                if current:
                    runs.append(current)
                current = []
            else:
                current.append(f"{x(i):.1f},{y(v):.1f}")
        if current:
            runs.append(current)
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                parts.append(f'<circle class="s{n + 1}" cx="{cx}" cy="{cy}" r="2.5"/>')
            else:
                parts.append(f'<polyline class="s{n + 1}" points="{" ".join(run)}"/>')
    parts.append("</svg>")
    legend = "".join(f'<span class="key s{n + 1}">{escape(s.label)}</span>' for n, s in enumerate(series))
    return mark_safe(f'<figure class="plot"><figcaption>{escape(title)} <span class="legend">{legend}</span>'
                     f'</figcaption>{"".join(parts)}</figure>')


def _bar_frame(css: str, title: str, top: float, unit: str, n: int) -> tuple[float, float, list[str]]:
    """What bar and stacked charts share: the plot's height, each bar's slot width, and the SVG's
    opening (its title, the top value, the baseline)."""
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM
    parts = [f'<svg class="{css}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
             f"<title>{escape(title)}</title>",
             f'<text class="axis" x="{PAD_LEFT - 6}" y="{PAD_TOP + 4}" text-anchor="end">{escape(_fmt(top, unit))}</text>',
             f'<line class="grid" x1="{PAD_LEFT}" x2="{WIDTH - PAD_RIGHT}" y1="{PAD_TOP + plot_h}" y2="{PAD_TOP + plot_h}"/>']
    return plot_h, (WIDTH - PAD_LEFT - PAD_RIGHT) / n, parts


def bar_chart(bars: list[tuple[str, float]], *, title: str, unit: str = "") -> SafeString:
    if not bars:
        return format_html('<p class="empty">{}: no data in this range.</p>', title)
    top = nice_max(max(v for _, v in bars))
    plot_h, slot, parts = _bar_frame("chart", title, top, unit, len(bars))
    for i, (label, value) in enumerate(bars):
        h = plot_h * value / top
        bx = PAD_LEFT + i * slot + slot * 0.15
        parts.append(f'<rect class="bar" x="{bx:.1f}" y="{PAD_TOP + plot_h - h:.1f}" width="{slot * 0.7:.1f}" '
                     f'height="{h:.1f}"><title>{escape(label)}: {escape(_fmt(value, unit))}</title></rect>'
                     f'<text class="axis" x="{bx + slot * 0.35:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
                     f'{escape(label)}</text>')
    parts.append("</svg>")
    return mark_safe(f'<figure class="plot"><figcaption>{escape(title)}</figcaption>{"".join(parts)}</figure>')


def stacked_chart(xs: list[datetime], series: list[Series], *, title: str) -> SafeString:
    """One bar per x, its series stacked bottom up in the order given (each segment's title says
    its number); an empty note when every value is 0."""
    totals = [sum(s.values[i] or 0 for s in series) for i in range(len(xs))]
    if not xs or not any(totals):
        return format_html('<p class="empty">{}: none in this range.</p>', title)
    top = nice_max(max(totals))
    plot_h, slot, parts = _bar_frame("chart stack", title, top, "", len(xs))
    for i in (0, len(xs) - 1):
        anchor = "start" if i == 0 else "end"
        parts.append(f'<text class="axis" x="{PAD_LEFT + i * slot:.1f}" y="{HEIGHT - 8}" text-anchor="{anchor}">'
                     f'{xs[i]:%m-%d %H:%M}</text>')
    for i, x in enumerate(xs):
        base = 0.0
        for n, s in enumerate(series):
            v = s.values[i] or 0
            if not v:
                continue
            h = plot_h * v / top
            y = PAD_TOP + plot_h * (1 - base / top) - h
            parts.append(f'<rect class="s{n + 1}" data-series="{escape(s.label)}" x="{PAD_LEFT + i * slot + slot * 0.1:.1f}" '
                         f'y="{y:.1f}" width="{slot * 0.8:.1f}" height="{h:.1f}"><title>{x:%H:%M} '
                         f'{escape(s.label)}: {v:g}</title></rect>')
            base += v
    parts.append("</svg>")
    legend = "".join(f'<span class="key s{n + 1}">{escape(s.label)} {sum(v or 0 for v in s.values):g}</span>'
                     for n, s in enumerate(series))
    return mark_safe(f'<figure class="plot" data-testid="lateness-causes"><figcaption>{escape(title)} '
                     f'<span class="legend">{legend}</span></figcaption>{"".join(parts)}</figure>')


def cause_words(cause: str) -> str:
    """A lateness cause (queue_core.keys.LATENESS_CAUSES) as the charts and totals name it."""
    return cause.replace("_", " ")


def cause_series(counts: dict[str, list[int]]) -> list[Series]:
    """One series per cause, in LATENESS_CAUSES' order (so a cause keeps its colour on every page)."""
    return [Series(cause_words(c), counts[c]) for c in LATENESS_CAUSES]


def cause_chart(causes: dict) -> SafeString:
    """Late deliveries per minute by cause (the engine's ``lateness_causes``), stacked."""
    xs = [datetime.fromtimestamp(m * 60, UTC) for m in causes["minutes"]]
    # A retry claimed on time counts too (retry_backoff): late against its first due time.
    return stacked_chart(xs, cause_series(causes["causes"]), title="Late deliveries per minute by cause (over 10 ms "
                                                                  "past due, or a retry after its backoff), last hour")


SPARK_STEP, SPARK_H = 2, 24      # px per minute (integers: the path below is whole numbers only)
SPARK_EVENTS = ("published", "acked", "dead")


def spark_path(values: list[int], top: int) -> str:
    """A compact SVG path of ``values`` on 0..``top``: whole pixels, relative steps, and a run of
    equal values (an idle minute after an idle minute) as one horizontal segment. A quiet hour is
    ``M0 23h118``; about a third of the bytes, and of the time, of a polyline of 60 points."""
    scale = (SPARK_H - 2) / top
    # 1 px kept at top and bottom so a line at 0 or at the top is not clipped by the border
    ys = [SPARK_H - 1 - round(v * scale) for v in values] if any(values) else [SPARK_H - 1] * len(values)
    out, run, last = [f"M0 {ys[0]}"] if ys else [], 0, ys[0] if ys else 0
    for y in ys[1:]:
        if y == last:
            run += SPARK_STEP
            continue
        if run:
            out.append(f"h{run}")
            run = 0
        out.append(f"l{SPARK_STEP} {y - last}")
        last = y
    if run:
        out.append(f"h{run}")
    return "".join(out)


def sparkline(per_minute: dict[str, list[int]], *, label: str) -> SafeString:
    """A line per event (published, acked, dead per minute, oldest first) on one shared scale, small
    enough for a table row; the totals are in its title and aria-label, the numbers in the row."""
    events = [e for e in SPARK_EVENTS if e in per_minute]
    if not events:
        return mark_safe("")
    n = len(per_minute[events[0]])
    top = max(1, *(max(per_minute[e], default=0) for e in events))
    width = SPARK_STEP * max(1, n - 1)
    words = ", ".join(f"{sum(per_minute[e])} {e}" for e in events)
    text = escape(f"{label}, last {n} minutes: {words}")
    parts = [f'<svg class="spark" viewBox="0 0 {width} {SPARK_H}" width="{width}" height="{SPARK_H}" '
             f'role="img" aria-label="{text}"><title>{text}</title>']
    for k, e in enumerate(events):
        parts.append(f'<path class="s{k + 1}" data-event="{e}" d="{spark_path(per_minute[e], top)}"/>')
    parts.append("</svg>")
    return mark_safe("".join(parts))


def minute_charts(series: dict, causes: dict | None = None) -> list[SafeString]:
    """The topic page's charts of one group's last hour from the engine's ``minute_series``:
    throughput (published, acked, dead per minute) and claim lateness (p50, p99 per minute); then,
    given ``lateness_causes``, the late deliveries by cause."""
    first = series["first_minute"]
    xs = [datetime.fromtimestamp((first + i) * 60, UTC) for i in range(len(series["published"]))]
    # Above the histogram's last bound (60 s) the engine says inf: drawn at that bound.
    top = LATENESS_BOUNDS_MS[-1]

    def capped(values):
        return [None if v is None else min(v, top) for v in values]
    return [line_chart(xs, [Series(e, series[e]) for e in SPARK_EVENTS], title="Throughput per minute, last hour"),
            line_chart(xs, [Series("p50", capped(series["p50_ms"])), Series("p99", capped(series["p99_ms"]))],
                       title="Claim lateness per minute, last hour (above 60 s drawn at 60 s)", unit="ms"),
            *([cause_chart(causes)] if causes is not None else [])]
