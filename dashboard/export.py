"""Export a state tab (or its query's matches) as JSON Lines or CSV: a POST (CSRF-checked) that
streams the file as it is read from Redis, a page at a time, so the web process's memory stays flat.

Redacted as every page shows messages, unless the user has ``view_payload`` and asks for the full
export (``reveal``): the same rule as revealing one message. Audited twice: when it starts (scope,
format, redacted or not) and when it ends (rows written, and "cancelled" when the client went
away before the end: the server stops reading Redis then)."""

import json

from django.http import HttpResponseBadRequest, StreamingHttpResponse
from django.views.decorators.http import require_POST

from . import audit, celery_tasks, services
from .access import can, require
from .finding import matches_as_shown, parse_query, with_fingerprint
from .message_view import too_dense
from .redaction import Redactor
from .views import group_name, parse_partition, parse_state, parse_time, topic_name


def redacted_row(message, rules: list[str]) -> dict:
    """An export row as every page shows the message (the same Redactor order as message_view)."""
    redactor = Redactor(rules)
    headers = redactor.headers(message.headers) if not message.corrupt else {}
    raw = message.payload if not message.corrupt else b""
    if too_dense(raw):
        payload = f"[{len(raw):,} bytes: too large to redact; a user with view_payload can export it in full]"
    else:
        text, value, _ = redactor.payload(celery_tasks.for_display(raw))
        payload = json.dumps(value, ensure_ascii=False, separators=(",", ":")) if value is not None else text
    err = message.last_error
    return services.export_row(message, payload=payload, headers=headers,
                               error=redactor.text(err.message) if err else None)


@require_POST
@require("view_queue")
def export_state(request, name, state, group=None):
    name = topic_name(name)
    state = parse_state(state)
    group = group_name(name, group)
    fmt = request.POST.get("format", "jsonl")
    if fmt not in services.EXPORT_FORMATS:
        return HttpResponseBadRequest(f"format {fmt[:20]!r}: one of {', '.join(services.EXPORT_FORMATS)}")
    query = with_fingerprint(parse_query(request.POST.get("q", "")), request.POST.get("fp", "").strip())  # 400 if bad
    full = request.POST.get("reveal") == "1"
    if full and not can(request.user, "view_payload"):
        return HttpResponseBadRequest("a full (unredacted) export needs the 'view_payload' permission; "
                                      "export without it for the redacted view")
    rules = services.redaction_rules(name)
    partition = parse_partition(request.POST.get("p"), services.topic_config(name).partitions)
    since_ms, until_ms = parse_time(request.POST.get("from")), parse_time(request.POST.get("to"))
    scope = {"state": state.value, "query": query.text(), "format": fmt, "redacted": not full,
             "partition": partition, "since_ms": since_ms, "until_ms": until_ms}
    audit.record(request.user, "export.start", topic=name, group=group, scope=scope)
    make_row = services.export_row if full else (lambda m: redacted_row(m, rules))
    written = 0

    def to_row(message):
        nonlocal written
        written += 1
        return make_row(message)
    lines = services.export_lines(fmt, name, state, query if query.terms else None, to_row=to_row, group=group,
                                  partition=partition, since_ms=since_ms, until_ms=until_ms,
                                  confirm=matches_as_shown(name, query) if query.terms else None)
    user = request.user

    def stream():
        result = "cancelled"
        try:
            yield from lines
            result = "ok"
        finally:   # also when the client goes away: the server closes this generator and stops reading Redis
            audit.record(user, "export.done", topic=name, group=group, scope=scope, affected=written, result=result)
    response = StreamingHttpResponse(stream(), content_type="application/x-ndjson" if fmt == "jsonl" else "text/csv")
    response["Content-Disposition"] = f'attachment; filename="{name}-{group}-{state.value}.{fmt}"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "no-store"
    return response
