"""The due-load forecast of one consumer group (a chart of what falls due per bucket over the next
hour, day or week, the group's drain rate overlaid, its peaks in words), and "spread" (every
pending message spaced evenly over a window: a previewed, audited, resumable operation)."""

from datetime import UTC, datetime

from django.contrib import messages
from django.db import transaction
from django.http import HttpResponseBadRequest
from django.shortcuts import redirect, render

from . import charts, scopes
from .access import REDIS_DOWN, require, user_perms
from .actions import ScopeUsed, start_operation
from .message_view import message_view
from .operation_kinds import KINDS
from .services import redaction_rules
from .services.contracts import Unavailable
from .services.forecast import (
    SPREAD_MAX_S,
    VIEWS,
    late_words,
    load_forecast,
    peak_words,
    spread_preview,
    spread_problem,
    spread_start,
)
from .views import group_name, topic_name

SPREAD_DEFAULT_MIN = 10


@require("view_queue")
def forecast(request, name, group=None):
    """GET ?view=hour|day|week: the chart, the drain rate and the peaks in words."""
    name = topic_name(name)
    group = group_name(name, group)
    view = request.GET.get("view", "hour")
    if view not in VIEWS:
        return HttpResponseBadRequest(f"unknown view {view[:20]!r}: use hour, day or week")
    try:
        load = load_forecast(name, group, view)
    except Unavailable as exc:
        return render(request, "delayq/error.html", {"status": 503, "text": REDIS_DOWN.format(exc)}, status=503)
    f = load.forecast
    xs = [datetime.fromtimestamp((f.start_ms + i * f.bucket_ms) / 1000, tz=UTC) for i in range(len(f.counts))]
    series = [charts.Series("due", list(f.counts))]
    if load.rate:
        series.append(charts.Series("drained at the busiest minute's rate", [load.capacity_per_bucket] * len(xs)))
    minutes = f.bucket_ms // 60_000
    chart = charts.line_chart(xs, series, title=f"Messages falling due per {minutes} min" if minutes < 60 else
                              f"Messages falling due per {minutes // 60} h")
    rows = [(x, c, late_words(late)) for x, c, late in zip(xs, f.counts, f.lateness(load.rate), strict=True) if c]
    return render(request, "delayq/forecast.html", {
        "name": name, "group": group, "view": view, "views": list(VIEWS), "load": load, "f": f, "chart": chart,
        "rows": rows, "peaks": [peak_words(p, load.rate, f.bucket_ms) for p in load.peaks],
        "spread_default": SPREAD_DEFAULT_MIN, "perms": user_perms(request.user)})


@transaction.non_atomic_requests
@require("replay_message")
def spread(request, name, group=None):
    """GET ?minutes=N: the preview (count, samples, scope in words), signed. POST: confirm, which
    starts the operation (the window starts then, by Redis's clock); nothing bulk happens here."""
    name = topic_name(name)
    group = group_name(name, group)
    kind = KINDS["spread"]
    back = redirect("delayq:topic_state", name, group, "pending")
    if request.method == "POST":
        token = request.POST.get("scope", "")
        try:
            scope = scopes.read(token, name, group, request.user, kind="spread")
        except scopes.ScopeInvalid as exc:
            return HttpResponseBadRequest(str(exc))
        try:
            scope = spread_start(name, scope)     # the window starts now; its slots are what is due in it now
            problem = spread_problem(name, scope)   # max_delay may have been lowered since the preview
        except Unavailable as exc:
            messages.error(request, REDIS_DOWN.format(exc))
            return back
        if problem:
            return HttpResponseBadRequest(problem)
        try:
            op = start_operation(request, name, group, kind, scope, scope["count"], kind.rate, token=token)
        except ScopeUsed as exc:   # a double click or a replayed POST: one preview starts one spread
            if exc.op is not None:
                messages.info(request, f"{exc}; here it is.")
                return redirect("delayq:operation", op_id=exc.op.pk)
            return render(request, "delayq/error.html", {"status": 409, "text": str(exc)}, status=409)
        if op is None:
            return back
        messages.success(request, f"Spread operation #{op.pk} started: {kind.words(name, scope)}.")
        return redirect("delayq:operation", op_id=op.pk)
    try:
        minutes = int(request.GET.get("minutes") or SPREAD_DEFAULT_MIN)
    except ValueError:
        return HttpResponseBadRequest("minutes must be a whole number")
    if not 1 <= minutes * 60 <= SPREAD_MAX_S:
        return HttpResponseBadRequest(f"the window must be 1 to {SPREAD_MAX_S // 60:,} minutes (got {minutes})")
    try:
        preview = spread_preview(name, group, minutes * 60)
    except Unavailable as exc:
        messages.error(request, REDIS_DOWN.format(exc))
        return back
    if problem := spread_problem(name, preview["scope"]):
        return HttpResponseBadRequest(problem)
    rules = redaction_rules(name)
    return render(request, "delayq/spread_preview.html", {
        "name": name, "group": group, "minutes": minutes, "count": preview["count"],
        "samples": [message_view(m, request.user, rules) for m in preview["samples"]],
        "words": kind.words(name, preview["scope"]),
        "scope_token": scopes.sign(name, request.user, preview["scope"], kind="spread"),
        "perms": user_perms(request.user)})
