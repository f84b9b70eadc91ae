"""The topic page's "Publish a message" form: what a newcomer tries first, before reading about
the API. The form's fields are turned into the JSON body the API's publish endpoint takes and read
by the same code (api_input.publish_messages, publish_arguments), so the form accepts and refuses
exactly what the API does, with the same words; it is permission-checked (publish_message),
refused for Celery bridge topics and audited like the API's publish.

htmx requests get the panel back (emptied after a publish, filled in with the error after a
refusal) and the page's counters refresh; plain requests are redirected to the topic after a
publish, and shown the form with the error after a refusal."""

import json
import math
import re
from datetime import UTC, datetime

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse

from . import audit, conf, services
from .access import REDIS_DOWN, require, user_perms
from .api_input import BodyError, lone_surrogate, publish_arguments, publish_messages, value_end
from .services.contracts import NotReplicated, QueueError, TopicFull, Unavailable, is_bridge_topic
from .views import render_region, topic_name

FIELDS = ("payload", "kind", "delay", "at", "key", "order_key", "headers", "ttl", "fairness_key", "priority", "dedup",
          "window", "after", "group")
BRIDGE_REFUSED = ("{name} is a Celery bridge topic: only the Celery bridge publishes to it (call the task's "
                  "apply_async with a countdown or eta)")


def _json_value(text: str, what: str) -> bytes:
    """The text of one JSON value, checked as the API checks a body (without decoding it)."""
    raw = text.strip().encode()
    try:
        end = value_end(raw, 0)
        if raw[end:].strip(b" \t\n\r"):
            raise BodyError(f"the body is not JSON: more follows the value at byte {end:,}")
    except BodyError as exc:
        raise BodyError(str(exc).replace("the body", what, 1)) from None
    return raw


def _number(text: str, field: str) -> bytes:
    try:
        value = float(text)
    except ValueError:
        raise BodyError(f"{field} must be a number of seconds, not {text!r}") from None
    if not math.isfinite(value):
        raise BodyError(f"{field} must be a finite number of seconds, not {text!r}")
    return json.dumps(int(value) if value.is_integer() and abs(value) < 2**53 else value).encode()


def _due_time(text: str) -> bytes:
    """The form's due time (a datetime-local field, in UTC unless it says otherwise) as the API's
    ``at``: an ISO 8601 time with an offset."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise BodyError(f"the due time must be a date and time such as 2026-11-23T18:00, not {text!r}") from None
    return json.dumps((at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat()).encode()


def form_body(values: dict[str, str]) -> bytes:
    """The publish body the API would be sent for these form values; BodyError for a field the
    form itself cannot turn into JSON (a payload or headers that are not JSON, a word for a number)."""
    members = []
    if values["kind"] == "text":
        members.append(("payload", json.dumps(values["payload"]).encode()))
    elif not values["payload"].strip():
        raise BodyError('the payload is empty: give a JSON value (e.g. {"order": 42}) or choose "text"')
    else:
        members.append(("payload", _json_value(values["payload"], "the payload")))
    for field, read in (("delay", _number), ("ttl", _number), ("window", _number)):
        if values[field].strip():
            members.append((field, read(values[field].strip(), field)))
    if values["at"].strip():
        members.append(("at", _due_time(values["at"].strip())))
    for field in ("key", "order_key", "fairness_key", "dedup", "after", "group"):
        if values[field]:
            members.append((field, json.dumps(values[field]).encode()))
    if priority := values["priority"].strip():
        # A whole number goes as one; anything else as the text typed, for the API's own refusal.
        whole = re.fullmatch(r"-?[0-9]{1,19}", priority) is not None
        members.append(("priority", json.dumps(int(priority) if whole else priority).encode()))
    if values["headers"].strip():
        members.append(("headers", _json_value(values["headers"], "the headers")))
    body = b"{" + b",".join(json.dumps(name).encode() + b":" + raw for name, raw in members) + b"}"
    if (at := lone_surrogate(body)) is not None:
        raise BodyError(f"a lone UTF-16 surrogate escape ({body[at:at + 6].decode()}) stands for no character: "
                        "remove it")
    limit = conf.api_max_body_bytes()
    if len(body) > limit:
        raise BodyError(f"the message is larger than {limit:,} bytes (DELAYQ_API_MAX_BODY_BYTES): store large blobs "
                        "elsewhere and publish a reference", 413)
    return body


def _published_words(name: str, msg_id, kwargs: dict) -> str:
    """What the publish did, in words: a held key (dedup) or a chain changes the answer."""
    outcome = getattr(msg_id, "outcome", "published")
    if outcome == "debounced":
        return f"Message {msg_id} took this payload and due time (debounced): it had not started yet."
    if outcome in ("duplicate", "throttled"):
        return f"Nothing new was published ({outcome}): the key {kwargs.get('key')} is held by message {msg_id}."
    if kwargs.get("after"):
        return (f"Published message {msg_id} to group {kwargs.get('group') or 'default'} of {name}, waiting for "
                f"{kwargs['after']} to be acked there.")
    return f"Published message {msg_id} to every consumer group of {name}."


def _panel(request, name, values=None, error="", status=200):
    context = {"name": name, "perms": user_perms(request.user), "celery_topic": False,
               "publish": {"values": values or {}, "error": error, "open": True}}
    response = render_region(request, "delayq/publish.html", "panel", context, status=status)
    if request.htmx and status < 400:
        response["HX-Trigger"] = "counts-changed"
    return response


@require("publish_message")
def publish_message(request, name):
    """GET: the form alone. POST: publish one message to every consumer group of the topic."""
    name = topic_name(name)
    if is_bridge_topic(name):
        return render(request, "delayq/error.html", {"status": 403, "text": BRIDGE_REFUSED.format(name=name)},
                      status=403)
    if not services.topic_exists(name):
        raise Http404(f"no topic {name}: create it first (the admin's Topics, or any publish from Python)")
    if request.method != "POST":
        return _panel(request, name)
    values = {field: request.POST.get(field, "") for field in FIELDS}
    try:
        _, (message,) = publish_messages(form_body(values))
    except BodyError as exc:   # not yet a message: refused like a malformed API body, not audited
        return _panel(request, name, values, f"Nothing was published: {str(exc).rstrip('.')}.", exc.status)
    actor = f"user:{request.user.get_username()}"
    entry = {"topic": name, "scope": {"via": "publish form"}, "requested": 1}
    try:
        payload, kwargs = publish_arguments(message)
        msg_id = services.publish(name, payload, actor=actor, **kwargs)
    except NotReplicated as exc:
        audit.record(request.user, "message.publish", affected=1, message_ids=list(exc.ids), result="unconfirmed",
                     detail=str(exc), **entry)
        messages.warning(request, f"Published as {exc.ids[0]}, but: {exc}.")
    except Unavailable as exc:
        audit.record(request.user, "message.publish", affected=0, result="error", detail=str(exc), **entry)
        return _panel(request, name, values, REDIS_DOWN.format(exc), 503)
    except (ValueError, QueueError) as exc:      # BodyError is a ValueError
        audit.record(request.user, "message.publish", affected=0, result="failed", detail=str(exc)[:2000], **entry)
        if isinstance(exc, TopicFull):   # its words say what was published and what to do
            return _panel(request, name, values, f"{exc} (The budget is set in the admin's Topics.)", 507)
        return _panel(request, name, values, f"Nothing was published: {str(exc).rstrip('.')}.",
                      getattr(exc, "status", 400))
    else:
        audit.record(request.user, "message.publish", affected=1, message_ids=[msg_id], result="ok", **entry)
        messages.success(request, _published_words(name, msg_id, kwargs))
    services.forget_summary(name)
    if request.htmx:
        return _panel(request, name)
    return redirect(reverse("delayq:topic", args=[name]))
