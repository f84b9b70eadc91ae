"""Finding messages on the pages: the header's box (``find/?q=``: an id, an id prefix or a dedup key,
in every topic, group and partition) and a state tab's query (``?q=payload.customer.id:42 ...``).

A query must never be an oracle for what a user is not shown: the engine's scan matches the raw
message, then every candidate is matched again against the message *as the page shows it* (the
same Redactor as message_view, headers before payload before texts), and only those count. So
``payload.password:hunter2`` finds nothing for anyone: the page shows that field masked to all
on a GET, and revealing it is an audited POST.
"""

from django.shortcuts import redirect, render
from django.urls import reverse

from . import celery_tasks, services
from .access import require, user_perms
from .message_view import too_dense
from .redaction import Redactor
from .services.contracts import (
    QUERY_EXAMPLE,
    QUERY_FIELDS,
    Query,
    QueryError,
    Term,
    message_fields,
    parse_query,
)

__all__ = ["QUERY_EXAMPLE", "QUERY_FIELDS", "QueryError", "find_page", "matches_as_shown", "parse_query",
           "state_messages", "visible_fields", "with_fingerprint"]


def visible_fields(message, rules: list[str]) -> dict:
    """What a query may read of a message: its fields as every page shows them (redacted)."""
    redactor = Redactor(rules)
    headers = redactor.headers(message.headers)        # first: its secrets are hunted in the texts too
    raw = message.payload if not message.corrupt else b""
    value = None
    if raw and not too_dense(raw):
        value = redactor.payload(celery_tasks.for_display(raw))[1]
    err = message.last_error
    error = ""
    if err:
        text = redactor.text(err.message)
        error = f"{err.type}: {text}" if text else err.type
    return message_fields(message, payload=value, headers=headers, error=error)


def state_messages(name: str, state, q: str, *, after, fingerprint: str = "",
                   since_ms=None, until_ms=None, group: str, partition=None, newest_first: bool = False):
    """A tab's page: (messages, next cursor, the scan's SearchPage or None). ``q`` is a query
    (a bounded scan), one word (an id or dedup key: that message, if it is in this tab) or empty.
    QueryError (a 400) for a malformed query."""
    query = parse_query(q)
    if not query.terms:
        messages, cursor = services.message_page(
            name, state, after=after, search=query.lookup, since_ms=since_ms, until_ms=until_ms,
            fingerprint=fingerprint, group=group, partition=partition, newest_first=newest_first)
        return messages, cursor, None
    query = with_fingerprint(query, fingerprint)
    page = services.search_page(name, state, query, after=after, confirm=matches_as_shown(name, query), since_ms=since_ms,
                                until_ms=until_ms, group=group, partition=partition, newest_first=newest_first)
    return page.messages, page.next_cursor, page


def matches_as_shown(topic: str, query):
    """The check a query's candidate must pass: it matches as the page shows it (redacted by the
    topic's rules now)."""
    query = parse_query(query) if isinstance(query, str) else query
    rules = services.redaction_rules(topic)
    return lambda message: query.matches(visible_fields(message, rules))


def with_fingerprint(query, fingerprint: str):
    """The query narrowed to one error group (the dead tab's ?fp=)."""
    return Query((*query.terms, Term("fingerprint", (), ":", fingerprint))) if fingerprint else query


def message_url(location) -> str:
    return reverse("delayq:message", args=[location.topic, location.group, location.id])


@require("view_queue")
def find_page(request):
    """The header's box: straight to the message when it is in one place, else every place it
    is, or where it was last seen."""
    text = request.GET.get("q", "").strip()
    context = {"q": text, "perms": user_perms(request.user), "result": None}
    if text:
        result = services.find(text)
        places = {(f.topic, f.group, f.id) for f in result.found}
        if len(places) == 1 and not result.seen:
            return redirect(message_url(result.found[0]))
        context["result"] = result
        context["rows"] = [{"f": f, "url": message_url(f)} for f in result.found]
    return render(request, "delayq/find.html", context)
