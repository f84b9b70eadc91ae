"""Celery tasks scheduled through delayq (queue_core.contrib.celery_bridge) as the dashboard shows them.

The bridge stores each waiting task as a JSON record whose ``body`` is Celery's serialized
message body, base64-encoded. Shown as it is, that would hide the task's arguments from the
redaction rules (a secret inside base64 is invisible to them) and from the operator. So every view
of such a record replaces the body by the arguments it carries, ``args`` and ``kwargs``, decoded
from JSON, before the usual redaction; a body in another serializer (pickle, yaml, ...) is not
decoded: it is replaced by a note of its size and type. Only the audited full reveal and the
original download show the record as stored.
"""

import base64
import binascii
import json

RECORD_FIELDS = {"v", "task", "headers", "body", "content_type"}


def is_record(value) -> bool:
    return isinstance(value, dict) and set(value) >= RECORD_FIELDS and value.get("v") in (1, 2)


def for_display(raw: bytes) -> bytes:
    """``raw`` with a Celery record's body replaced by its decoded arguments; anything else
    unchanged."""
    try:
        record = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return raw
    if not is_record(record):
        return raw
    shown = {"task": record["task"], "id": (record.get("headers") or {}).get("id"),
             "eta": (record.get("headers") or {}).get("eta")}
    shown.update(_arguments(record))
    try:
        return json.dumps(shown, ensure_ascii=False).encode()
    except UnicodeEncodeError:        # a lone surrogate in the arguments: kept as its escape
        return json.dumps(shown).encode()


def _arguments(record: dict) -> dict:
    body = record.get("body") or ""
    try:
        data = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError, TypeError):
        return {"arguments": "[not readable: the stored body is not base64]"}
    if record.get("content_type") != "application/json":
        return {"arguments": f"[{len(data):,} bytes of {record.get('content_type')}: not shown]"}
    try:
        decoded = json.loads(data.decode(record.get("content_encoding") or "utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError, LookupError):
        return {"arguments": "[not readable: the body is not the JSON its content type says]"}
    if isinstance(decoded, list) and len(decoded) >= 2:     # Celery's protocol 2: [args, kwargs, embed]
        return {"args": decoded[0], "kwargs": decoded[1]}
    return {"arguments": decoded}                           # protocol 1 or a custom body, as it is
