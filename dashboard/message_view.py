"""A message as one user may see it: payload, headers, error text, traceback and history all
redacted together (one Redactor per message, so a secret masked in the payload is masked in the
error text too). Pages and the JSON API show messages only through here.

Everyone gets the redacted view on a GET; ``reveal=True`` (a POST by a user with view_payload,
audited by the caller) gives the full one.
"""

import json
import re
from datetime import UTC, datetime
from types import SimpleNamespace

from . import celery_tasks
from .access import can
from .redaction import Redactor

PREVIEW_CHARS = 160
# Headers published from Python have no size limit of their own: a page shows this much of them.
HEADER_CHARS = 16_384
# What a template may read of the message itself: nothing here can carry a secret.
PLAIN_FIELDS = ("id", "state", "group", "partition", "attempts", "replay_count", "corrupt", "due_at",
                "lease_deadline", "dead_at", "created_at", "key", "max_attempts", "order_key", "ttl", "held",
                "key_holder", "priority", "fairness_key", "waiting_for", "waiting_delay", "lateness_cause",
                "late_behind", "late_ms")


# History entries whose detail the engine writes in full (no producer or handler text in it): never
# redacted, or the card-number rule would mask a 13-digit epoch-ms time one time in ten.
ENGINE_DETAIL_EVENTS = frozenset({"published", "claimed", "rescheduled", "delivered_now", "killed", "replayed",
                                  "edited", "debounced", "throttled", "duplicate", "parent_gone"})
_RESCHEDULED = re.compile(r"^due (-?[0-9.e+]+) \(was (-?[0-9.e+]+)\)$")
_DEBOUNCED = re.compile(r"^payload replaced; due (-?[0-9.e+]+) \(was (-?[0-9.e+]+)\)$")


def _abs_time(ms: str) -> str:
    """Epoch ms as the pages write times ('2026-11-24 21:30:27.123 UTC'); as written when unreadable."""
    try:
        value = float(ms)
        dt = datetime.fromtimestamp(value / 1000, tz=UTC)
    except (ValueError, OverflowError, OSError):
        return ms
    return f"{dt:%Y-%m-%d %H:%M:%S}.{int(value % 1000):03d} UTC"


def history_detail(event: str, detail: str, scrub) -> str:
    """A history entry's detail as shown: engine-written times formatted like every other time,
    engine-written details as they are, anything else (error texts) through the redactor."""
    if event not in ENGINE_DETAIL_EVENTS:
        return scrub(detail)
    if event == "rescheduled" and (m := _RESCHEDULED.match(detail or "")):
        return f"due {_abs_time(m.group(1))} (was {_abs_time(m.group(2))})"
    if event == "debounced" and (m := _DEBOUNCED.match(detail or "")):
        return f"payload replaced; due {_abs_time(m.group(1))} (was {_abs_time(m.group(2))})"
    return detail


def plain_fields(message) -> SimpleNamespace:
    return SimpleNamespace(**{f: getattr(message, f, None) for f in PLAIN_FIELDS})


def _full_text(raw: bytes) -> str:
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False, sort_keys=True)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return raw.decode("utf-8", "replace")


def _compact(value, text: str) -> str:
    if value is None:
        return text
    try:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (ValueError, RecursionError):
        return text


# A JSON payload with more values than this is not parsed, redacted and pretty-printed for a page
# (a dense 1 MiB of "[[]]," costs seconds and hundreds of MB to walk): it is said, and a user with
# view_payload reveals or downloads it. Counted on the bytes, so a refusal costs a scan.
MAX_DISPLAY_VALUES = 200_000


def too_dense(raw: bytes) -> bool:
    head = raw[:64].lstrip()
    if not head or head[0] not in b"[{":
        return False
    return raw.count(b",") + raw.count(b"[") + raw.count(b"{") > MAX_DISPLAY_VALUES


def safe_text(text: str) -> str:
    """Text every page can encode: a lone surrogate (JSON can carry one as an escape, and Python
    decodes it) is shown as its escape instead of failing the page."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _headers_text(headers: dict) -> str:
    if not headers:
        return ""
    text = safe_text(json.dumps(headers, indent=2, sort_keys=True, ensure_ascii=False))
    if len(text) <= HEADER_CHARS:
        return text
    return (text[:HEADER_CHARS] + f"\n… {len(text) - HEADER_CHARS:,} more characters of headers not shown "
            f"(read them all from Python: DelayQueue.get(topic, id).headers)")


JOURNAL_HIDDEN = ("[hidden: this message's payload cannot be redacted for display, so what its handlers "
                  "logged is hidden too; a user with the view_payload permission can reveal it]")


def journal_view(journal, scrub_all, hidden: bool = False) -> dict | None:
    """What a message's handlers reported (queue_core.Journal), its note and lines through
    ``scrub_all`` (texts -> texts: the message's redactor); None when nothing was. ``hidden``:
    the payload could not be redacted, so neither can what the handlers wrote about it."""
    if journal is None or journal.empty:
        return None
    texts = [journal.note, *(line.text for line in journal.lines)]
    texts = [JOURNAL_HIDDEN if t else t for t in texts] if hidden else scrub_all(texts)
    return {"progress": journal.progress, "percent": None if journal.progress is None else round(journal.progress * 100),
            "note": texts[0], "at": journal.progress_at, "attempt": journal.progress_attempt,
            # "shown": a line's own line breaks continue it visibly, so a handler cannot print what
            # looks like further lines of the log.
            "lines": [{"at": line.at, "attempt": line.attempt, "text": text, "shown": text.replace("\n", "\n    ↳ ")}
                      for line, text in zip(journal.lines, texts[1:], strict=True)]}


def journal_json(view: dict | None) -> dict | None:
    """journal_view for the JSON API (times as ISO 8601)."""
    if view is None:
        return None
    return {"progress": view["progress"], "note": view["note"], "progress_at": view["at"].isoformat() if view["at"]
            else None, "progress_attempt": view["attempt"],
            "lines": [{"at": line["at"].isoformat() if line["at"] else None, "attempt": line["attempt"],
                       "text": line["text"]} for line in view["lines"]]}


def message_view(message, user, rules: list[str], *, reveal: bool = False, with_history: bool = False,
                 journal=None) -> dict:
    """Plain data for templates and the API; ``m`` carries only the fields that are never secret
    (PLAIN_FIELDS), not the engine's message."""
    full = reveal and can(user, "view_payload")
    redactor = Redactor(rules)
    raw = message.payload if not message.corrupt else b""
    dense = too_dense(raw)
    if full:
        text, value, hidden = raw.decode("utf-8", "replace") if dense else _full_text(raw), None, False
        headers = message.headers or {}
        scrub = str
    else:
        headers = redactor.headers(message.headers)       # before texts: their secrets are hunted too
        if dense:
            text, value, hidden = (f"[{len(raw):,} bytes of JSON holding more than {MAX_DISPLAY_VALUES:,} values: "
                                   "too large to redact and show here; a user with the view_payload permission "
                                   "can reveal or download it]"), None, True
        else:
            # A Celery task's arguments travel base64-encoded: decoded first, so the rules see them.
            text, value, hidden = redactor.payload(celery_tasks.for_display(raw))
        scrub = redactor.text
    text = safe_text(text)
    # After the payload and headers: the secrets seen there are masked in the log lines too.
    log_scrub = redactor.log_texts if scrub is not str else list
    # Not shown because it could not be redacted (not JSON under explicit rules, too dense, too deep).
    unredactable = not full and hidden and value is None
    compact = safe_text(_compact(value, text)) if not full else text.replace("\n", " ")
    err = message.last_error
    return {
        "m": plain_fields(message),
        "payload": {"text": text, "preview": compact[:PREVIEW_CHARS], "truncated": len(compact) > PREVIEW_CHARS,
                    "redacted": hidden, "size": len(raw), "revealed": full},
        "headers": _headers_text(headers),
        "error": {"type": err.type, "message": scrub(err.message), "fingerprint": err.fingerprint,
                  "traceback": scrub(err.traceback)} if err else None,
        "history": [{"at": h.at, "event": h.event, "attempt": h.attempt, "actor": h.actor,
                     "detail": history_detail(h.event, h.detail, scrub)}
                    for h in reversed(message.history)] if with_history else [],
        "journal": journal_view(journal, log_scrub, unredactable),
    }
