"""Indexed fields: up to MAX_INDEXES JSON paths of the payload or headers per topic, kept by the
publish script in a lex-ordered set per partition so an equality query reads its candidates
instead of scanning a state (issue 36 point 3; design in docs/design.md, "Indexed fields").

This module is the one place that says what an index holds and how a query value is looked up,
so the two can never disagree:

- a field is written as a query term's left side: ``payload.customer.id`` or ``header.tenant``;
- a message's entries are the texts of the scalars at that path (each element of a list at the
  end, as the query matches any element); objects and nested lists are not indexed;
- numbers, and strings that read as numbers, are indexed in one canonical number text ("42" for
  42, 42.0 and "42.0"), so a query value that is a number finds every candidate the query's own
  rules (numbers compare as numbers, strings as text) might accept; the search re-checks every
  candidate against the whole query, so a candidate too many is filtered, never returned;
- values longer than query.MAX_VALUE_CHARS, or holding a NUL, are not indexed: no equality term
  can name them (a term's value is at most that long), and a NUL would break the entry's format.
"""

import json
import math
import re
from typing import Any

from .errors import InvalidArgument
from .query import MAX_PATH_SEGMENTS, MAX_VALUE_CHARS, PATH_FIELDS, at_path, scalar_text

MAX_INDEXES = 4
MAX_ENTRIES = 256   # index entries one message may have (publish refuses more; see index_texts)
_FIELD = re.compile(rf"^(payload|header)((?:\.[A-Za-z0-9_$@-]+){{1,{MAX_PATH_SEGMENTS}}})$")
_NUMBER = re.compile(r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$")


def parse_field(text: str) -> tuple[str, tuple[str, ...]]:
    """("payload" | "header", path) of an index field; InvalidArgument says what is wrong."""
    m = _FIELD.match(text) if isinstance(text, str) else None
    if m is None or m[1] not in PATH_FIELDS:
        raise InvalidArgument(f"an index field is payload.<path> or header.<name> (as in a query, e.g. "
                              f"payload.customer.id), not {str(text)[:80]!r}")
    return m[1], tuple(m[2].split(".")[1:])


def check_fields(fields) -> tuple[str, ...]:
    """The index fields as given, validated: at most MAX_INDEXES, each once."""
    if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
        raise InvalidArgument("indexes takes a list of fields, e.g. ['payload.customer.id', 'header.tenant']")
    fields = tuple(fields)
    if len(fields) > MAX_INDEXES:
        raise InvalidArgument(f"a topic takes at most {MAX_INDEXES} indexed fields, not {len(fields)}")
    if len(set(fields)) != len(fields):
        raise InvalidArgument("an indexed field is listed twice")
    for f in fields:
        parse_field(f)
        if f.lower() == "header.delayq-tick":
            # Set per tick inside the tick script, after the entries were computed: not indexable.
            raise InvalidArgument(f"{f} is set by each schedule tick and cannot be indexed; query it with a scan")
    return fields


def canonical_number(value: float) -> str:
    """The one text of a number: whole numbers without a fraction, others as Python's repr."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def entry_text(value: Any) -> str | None:
    """The index text of one JSON scalar (None: not indexed)."""
    if isinstance(value, bool) or value is None:
        text = scalar_text(value)
    elif isinstance(value, int | float):
        try:
            value = float(value)          # as Lua holds every JSON number: a double
        except OverflowError:
            return None
        if not math.isfinite(value):
            return None
        text = canonical_number(value)
    elif isinstance(value, str):
        text = canonical_number(float(value)) if _NUMBER.match(value) and math.isfinite(float(value)) else value
    else:
        return None
    if len(text) > MAX_VALUE_CHARS or "\0" in text:
        return None
    try:
        text.encode("utf-8")          # bytes that were not UTF-8 (read with surrogateescape): no
    except UnicodeEncodeError:        # query (valid text) can name them
        return None
    return text


def lookup_text(want: str) -> str | None:
    """The index text an equality term's value is looked up by (None: the index cannot answer it:
    a wildcard, a NUL, longer than any indexed text, or a number too large for a double, which the
    query matches against a stored number read as infinite, never indexed)."""
    if "*" in want or "\0" in want or len(want) > MAX_VALUE_CHARS:
        return None
    if _NUMBER.match(want):
        return canonical_number(float(want)) if math.isfinite(float(want)) else None
    return want


def entries(fields: tuple[str, ...], payload: Any, headers: dict | None) -> list[tuple[int, str]]:
    """(slot, text) of every entry a message has: slot is the field's position (1-based) in
    ``fields``; ``payload`` is the parsed JSON (None when it is not JSON)."""
    out: list[tuple[int, str]] = []
    for slot, f in enumerate(fields, 1):
        kind, path = parse_field(f)
        found, value = at_path(payload if kind == "payload" else (headers or {}), path)
        if not found or isinstance(value, dict):
            continue
        seen = set()
        for v in (value if isinstance(value, list) else [value]):   # every element: none may be missed
            text = None if isinstance(v, list | dict) else entry_text(v)
            if text is not None and text not in seen:
                seen.add(text)
                out.append((slot, text))
    return out


def declared(layout) -> tuple[tuple[int, str], ...]:
    """(slot, field) of the topic's indexed fields, from its cached layout."""
    return tuple((int(s), f) for s, f in json.loads(layout.indexes)) if layout.indexes else ()


def parse_json(raw: bytes | str | None) -> Any:
    """JSON as the scripts' cjson reads it: bytes that are not UTF-8 kept (surrogateescape), every
    number a double; None when it is not JSON."""
    if not raw:
        return None
    try:
        text = raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else raw
        return json.loads(text, parse_int=float)
    except (ValueError, RecursionError):
        return None


def entries_text(fields: tuple[tuple[int, str], ...], payload: bytes, headers: dict | None) -> str:
    """A message's entries as the scripts store them: "<slot>\\0<text>" pairs joined by NUL."""
    doc = parse_json(payload)
    names = tuple(f for _, f in fields)
    slots = {i + 1: s for i, (s, _) in enumerate(fields)}
    return "\0".join(f"{slots[i]}\0{text}" for i, text in entries(names, doc, headers))


def entry_count(text: str) -> int:
    """How many entries an entries string (entries_text) holds."""
    return (text.count("\0") + 1) // 2 if text else 0


def capped(text: str) -> str:
    """The first MAX_ENTRIES entries of an entries string: a schedule's tick, whose payload was
    checked when the schedule was written, may meet fields declared after that."""
    if entry_count(text) <= MAX_ENTRIES:
        return text
    return "\0".join(text.split("\0")[:2 * MAX_ENTRIES])


def index_texts(topic: str, fields: tuple[tuple[int, str], ...], items: list[bytes], which,
                headers: dict | None) -> dict[int, str] | None:
    """{i: entries_text} of items[i] for each i of ``which`` (None: the topic declares no indexed
    field). A message with more than MAX_ENTRIES entries is refused (InvalidArgument): each is a
    sorted-set member written by the publish's one script call, so a payload whose indexed field
    is a list of 100,000 values would hold Redis for about a second."""
    if not fields:
        return None
    texts = {}
    for i in which:
        texts[i] = text = entries_text(fields, items[i], headers)
        if (n := entry_count(text)) > MAX_ENTRIES:
            raise InvalidArgument(f"message {i + 1} of the call has {n:,} values in topic {topic!r}'s indexed "
                                  f"fields; a message may have at most {MAX_ENTRIES} (each element of a list "
                                  f"is one): shorten the list or index another field")
    return texts


def entries_blob(texts: list[str]) -> str:
    """The entries of a call's messages, "<length>:<entries>" each (includes/index.lua)."""
    return "".join(f"{len(t.encode())}:{t}" for t in texts)


def record_entries(fields: tuple[tuple[int, str], ...], record: bytes | None, payload: bytes | None = None) -> str | None:
    """The entries of a stored record (its payload, or ``payload`` in its place: an edit), None
    when the record is missing or not one of ours."""
    from .message import header_fields, split_record  # message imports query, as this module does

    split = split_record(record)
    if split is None:
        return None
    parts, stored = split
    headers = parse_json(header_fields(parts)["hdr"])
    return entries_text(fields, stored if payload is None else payload, headers if isinstance(headers, dict) else None)
