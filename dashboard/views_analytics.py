"""The Analytics page (per topic and across topics) and its "run now" action.

Figures come from the tables the Spark job's outputs were loaded into (dashboard.analytics); the
page never reads the archive or runs Spark itself. Long ranges are shown in coarser buckets so a
chart has at most ~240 points: counts are summed per bucket; for timings a bucket shows the
count-weighted mean of its minutes' p50 and the highest p95, p99 and max of its minutes.
"""

from datetime import UTC, datetime, timedelta

from django.contrib import messages
from django.db import transaction
from django.db.models import Max, Min, Sum
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from delayq_analytics.counts import COUNT_COLUMNS

from . import analytics, background, conf, services
from .access import require, user_perms
from .charts import Series, bar_chart, cause_series, cause_words, line_chart, stacked_chart
from .models import AnalyticsRun, AttemptStat, ErrorGroupStat, LateCauseStat, MinuteStat, TimingStat
from .services.contracts import LATENESS_CAUSES
from .views import render_region, topic_name

RANGES = {"1h": 60, "6h": 360, "24h": 1_440, "7d": 10_080, "30d": 43_200}   # minutes
COVERED = "covered"   # the default range: the minutes the loaded data covers
BUCKETS = (1, 5, 15, 60, 360, 1_440)
MAX_POINTS = 240
THROUGHPUT = ("published", "delivered", "acked", "retried", "dead_lettered", "replayed")
ALL = "*"


def bucket_minutes(span: int) -> int:
    return next(b for b in BUCKETS if span / b <= MAX_POINTS)


def _window(scope_filter: dict, span: int) -> tuple[datetime, datetime]:
    """The range ends at the newest loaded minute (analytics run nightly; 'now' may be empty)."""
    latest = MinuteStat.objects.filter(**scope_filter).aggregate(m=Max("minute"))["m"]
    end = (latest + timedelta(minutes=1)) if latest else datetime.now(UTC).replace(second=0, microsecond=0)
    return end - timedelta(minutes=span), end


def _covered(scope_filter: dict) -> tuple[datetime, datetime] | None:
    """From the first loaded minute to the last, padded by a tenth of that (at least 5 minutes) on
    each side and at most the longest range back from the last: a fresh install's first hour fills
    the charts instead of being one spike at the end of a fixed 24 h. None without data."""
    bounds = MinuteStat.objects.filter(**scope_filter).aggregate(first=Min("minute"), last=Max("minute"))
    if bounds["last"] is None:
        return None
    end = bounds["last"] + timedelta(minutes=1)
    pad = timedelta(minutes=max(5, int((end - bounds["first"]).total_seconds() // 60) // 10))
    return max(bounds["first"] - pad, end - timedelta(minutes=max(RANGES.values()))), end + pad


def _buckets(start: datetime, end: datetime, size: int) -> list[datetime]:
    count = int((end - start).total_seconds() // 60 // size)
    return [start + timedelta(minutes=i * size) for i in range(count)]


def _index(minute: datetime, start: datetime, size: int) -> int:
    return int((minute - start).total_seconds() // 60 // size)


def count_series(topic: str | None, start, end, size, group: str = ALL) -> tuple[list[datetime], dict[str, list[int]]]:
    """Counts of one topic's group (``*``: its groups together), or with no topic of every topic's
    totals."""
    xs = _buckets(start, end, size)
    cols = COUNT_COLUMNS
    rows = MinuteStat.objects.filter(minute__gte=start, minute__lt=end, group=group if topic else ALL)
    if topic:
        rows = rows.filter(topic=topic)
    sums = {c: [0] * len(xs) for c in cols}
    for row in rows.values("minute").annotate(**{c: Sum(c) for c in cols}):
        i = _index(row["minute"], start, size)
        if 0 <= i < len(xs):
            for c in cols:
                sums[c][i] += row[c] or 0
    return xs, sums


def rate_series(sums: dict[str, list[int]]) -> dict[str, list[float | None]]:
    """Retry rate: retried / finished attempts (acked + nacked + expired + rejected).
    Dead-letter rate: dead-lettered / (acked + dead-lettered), the share of outcomes that died."""
    out = {"retry rate": [], "dead-letter rate": []}
    for i in range(len(sums["acked"])):
        finished = sums["acked"][i] + sums["nacked"][i] + sums["expired"][i] + sums["rejected"][i]
        outcomes = sums["acked"][i] + sums["dead_lettered"][i]
        out["retry rate"].append(round(100 * sums["retried"][i] / finished, 2) if finished else None)
        out["dead-letter rate"].append(round(100 * sums["dead_lettered"][i] / outcomes, 2) if outcomes else None)
    return out


def timing_series(topic: str | None, measure: str, start, end, size, group: str = ALL) -> dict[str, list[float | None]]:
    n = len(_buckets(start, end, size))
    acc = [{"count": 0, "p50w": 0, "p95": None, "p99": None, "max": None} for _ in range(n)]
    rows = TimingStat.objects.filter(topic=topic or ALL, group=group if topic else ALL, measure=measure,
                                     minute__gte=start, minute__lt=end)
    for r in rows.values("minute", "count", "p50", "p95", "p99", "max"):
        i = _index(r["minute"], start, size)
        if not 0 <= i < n:
            continue
        a = acc[i]
        a["count"] += r["count"]
        a["p50w"] += r["p50"] * r["count"]
        for q in ("p95", "p99", "max"):
            a[q] = r[q] if a[q] is None else max(a[q], r[q])
    return {"p50": [round(a["p50w"] / a["count"], 1) if a["count"] else None for a in acc],
            "p95": [a["p95"] for a in acc], "p99": [a["p99"] for a in acc], "max": [a["max"] for a in acc],
            "count": [a["count"] for a in acc]}


def late_cause_series(topic: str | None, start, end, size, group: str = ALL) -> dict[str, list[int]]:
    """Late deliveries per bucket by cause of one topic's group (``*``: its groups together), or
    with no topic summed over every topic's ``*`` rows (the job writes no all-topics rollup). A
    cause the page does not know (a newer engine's) is left out rather than mislabelled."""
    n = len(_buckets(start, end, size))
    out = {c: [0] * n for c in LATENESS_CAUSES}
    rows = LateCauseStat.objects.filter(group=group if topic else ALL, minute__gte=start, minute__lt=end,
                                        cause__in=LATENESS_CAUSES)
    if topic:
        rows = rows.filter(topic=topic)
    for r in rows.values("minute", "cause").annotate(n=Sum("deliveries")):
        i = _index(r["minute"], start, size)
        if 0 <= i < n:
            out[r["cause"]][i] += r["n"]
    return out


def _late_causes(topic, start, end, size, group, xs, unit) -> dict:
    """The stacked chart, the totals in words (largest first), and why it is empty: the latest
    finished run's outputs had no late_causes (a job from before causes), or none were late."""
    counts = late_cause_series(topic, start, end, size, group)
    totals = sorted(((cause_words(c), sum(v)) for c, v in counts.items() if any(v)), key=lambda t: -t[1])
    last = AnalyticsRun.objects.filter(status=AnalyticsRun.Status.DONE).first()
    return {"chart": stacked_chart(xs, cause_series(counts), title=f"Late deliveries {unit} by cause (over 10 ms past due, "
                                                                   "or a retry after its backoff)")
            if totals else None, "totals": totals, "predates": last is not None and not last.late_causes}


def _table(xs, columns: dict[str, list]) -> dict:
    return {"headers": list(columns), "rows": [(x, [columns[c][i] for c in columns]) for i, x in enumerate(xs)
                                               if any(columns[c][i] not in (None, 0) for c in columns)]}


@require("view_queue")
def analytics_page(request, name: str | None = None):
    topic = topic_name(name) if name else None
    range_key = request.GET.get("range") if request.GET.get("range") in RANGES else COVERED
    if request.htmx:
        return run_region(request, range_key)
    # One consumer group of the topic, or * (the topic over its groups; all topics: always *).
    consumer_groups = (sorted(set(MinuteStat.objects.filter(topic=topic).exclude(group=ALL)
                                  .values_list("group", flat=True).distinct())) if topic else [])
    group = request.GET.get("group", ALL) if topic else ALL
    if group not in consumer_groups:
        group = ALL
    scope = {"topic": topic, "group": group} if topic else {"group": ALL}
    window = _covered(scope) if range_key == COVERED else None
    start, end = window or _window(scope, RANGES.get(range_key, RANGES["24h"]))
    size = bucket_minutes(int((end - start).total_seconds() // 60))
    xs, sums = count_series(topic, start, end, size, group)
    rates = rate_series(sums)
    lateness = timing_series(topic, "lateness", start, end, size, group)
    handler = timing_series(topic, "handler", start, end, size, group)
    attempts = list(AttemptStat.objects.filter(topic=topic or ALL, group=group).order_by("attempts")
                    .values_list("attempts", "messages"))
    acked = sum(m for _, m in attempts)
    retried_share = 100 * sum(m for a, m in attempts if a > 1) / acked if acked else None
    groups = list(ErrorGroupStat.objects.filter(group=group, **({"topic": topic} if topic else {}))[:10])
    if topic:
        texts = services.error_texts(topic, [g.fingerprint for g in groups], group)
        for g in groups:
            g.text = texts.get(g.fingerprint, "")
    for g in groups:
        # The dead tab and messages of the error group's consumer group (the default one for *).
        in_group = g.group if g.group != ALL else "default"
        g.dead_url = reverse("delayq:topic_state", args=[g.topic, in_group, "dead"])
        g.message_url = reverse("delayq:message", args=[g.topic, in_group, "-"])[:-2]
    has_data = any(any(v) for v in sums.values())
    unit = f"per {size} min" if size > 1 else "per minute"
    context = {
        "name": topic, "group": group, "consumer_groups": consumer_groups, "range_key": range_key, "ranges": [COVERED, *RANGES], "bucket": size, "start": start, "end": end,
        "has_data": has_data, "run": AnalyticsRun.objects.first(), "attempts": attempts,
        "retried_share": retried_share, "groups": groups, "unit": unit, "perms": user_perms(request.user),
        "charts": [
            (line_chart(xs, [Series(c.replace("_", "-"), sums[c]) for c in THROUGHPUT], title=f"Events {unit}"),
             _table(xs, {c.replace("_", "-"): sums[c] for c in THROUGHPUT})),
            (line_chart(xs, [Series(k, v) for k, v in lateness.items() if k != "count"],
                        title="Delivery lateness (first attempts)", unit="ms"),
             _table(xs, {k: lateness[k] for k in ("count", "p50", "p95", "p99", "max")})),
            (line_chart(xs, [Series(k, v) for k, v in handler.items() if k != "count"], title="Handler time",
                        unit="ms"),
             _table(xs, {k: handler[k] for k in ("count", "p50", "p95", "p99", "max")})),
            (line_chart(xs, [Series(k, v) for k, v in rates.items()], title="Retry and dead-letter rates", unit="%"),
             _table(xs, rates)),
        ],
        "attempts_chart": bar_chart([(str(a), m) for a, m in attempts], title="Attempts needed by acked messages"),
        "late": _late_causes(topic, start, end, size, group, xs, unit),
        "days": conf.analytics_days(),
        "topics": sorted(set(MinuteStat.objects.values_list("topic", flat=True).distinct())),
    }
    return render_region(request, "delayq/analytics.html", "run", context)


def run_region(request, range_key: str):
    """The latest run's panel, which live.js refreshes on the operator's interval (none of the
    charts are computed for it). A refresh that was watching an active run (``?watching=<pk>``)
    and sees it finished reloads the page (HX-Refresh), for the charts that run wrote."""
    run = AnalyticsRun.objects.first()
    response = render_region(request, "delayq/analytics.html", "run", {
        "run": run, "range_key": range_key, "perms": user_perms(request.user), "days": conf.analytics_days()})
    watching = request.GET.get("watching", "")
    if watching.isascii() and watching.isdigit() and not AnalyticsRun.objects.filter(pk=int(watching), active=True).exists():
        response["HX-Refresh"] = "true"
    return response


@transaction.non_atomic_requests
@require_POST
@require("run_analytics")
def analytics_run(request):
    try:
        run = analytics.create_run(request.user, trigger="manual", since=analytics.default_since())
    except analytics.RunRefused as exc:
        messages.error(request, f"Not started: {exc}.")
    else:
        from .tasks import run_analytics
        try:
            background.enqueue(run_analytics, run.pk)
        except background.BrokerUnavailable as exc:
            run.delete()   # a pending run nobody will start would refuse every later run
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Analytics run #{run.pk} queued; progress shows below.")
    back = request.POST.get("next") or ""
    return redirect(back if back.startswith(reverse("delayq:analytics")) else reverse("delayq:analytics"))
