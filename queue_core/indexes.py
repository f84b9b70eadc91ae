"""Indexed fields: up to MAX_INDEXES JSON paths of the payload or headers per topic, kept by the
publish script in a log per partition so an equality query reads its candidates instead of
scanning a state (issue 36 point 3; design in docs/design.md, "Indexed fields").

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
  can name them (a term's value is at most that long), and a NUL would break the entry's format;
- in the log an entry is a hash of "<slot>\0<text>" and the message's id (entry_hash,
  entries_args): a query looks its value's hash up, so the log says only which messages *may*
  match, and the search checks every candidate against the whole query.
"""

import binascii
import json
import math
import operator
import re
import zlib
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from .errors import InvalidArgument
from .keys import INDEX_HASH_CHARS
from .query import MAX_PATH_SEGMENTS, MAX_VALUE_CHARS, PATH_FIELDS, at_path, scalar_text

MAX_INDEXES = 4
MAX_ENTRIES = 256   # index entries one message may have (publish refuses more: publish_entries.hashed_entries)
_FIELD = re.compile(rf"^(payload|header)((?:\.[A-Za-z0-9_$@-]+){{1,{MAX_PATH_SEGMENTS}}})$")
NUMBER = re.compile(r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$")


@lru_cache(maxsize=256)
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


EXACT = 10 ** 15   # ints below this (in size) are exact doubles, and canonical_number writes them whole


def canonical_number(value: float) -> str:
    """The one text of a number: whole numbers without a fraction, others as Python's repr."""
    if value == int(value) and abs(value) < EXACT:
        return str(int(value))
    return repr(float(value))


def entry_text(value: Any) -> str | None:
    """The index text of one JSON scalar (None: not indexed)."""
    if type(value) is int and -EXACT < value < EXACT:
        return str(value)             # canonical_number(float(value)), as a double holds it exactly
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
        text = canonical_number(float(value)) if NUMBER.match(value) and math.isfinite(float(value)) else value
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
    if NUMBER.match(want):
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
    return _declared(layout.indexes) if layout.indexes else ()


@lru_cache(maxsize=256)
def _declared(text: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(s), f) for s, f in json.loads(text))   # (read once: each publish asks)


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
    """A message's entries: "<slot>\\0<text>" pairs joined by NUL."""
    names = tuple(f for _, f in fields)
    return "\0".join(f"{fields[i - 1][0]}\0{text}" for i, text in entries(names, parse_json(payload), headers))


Hashed = str   # an entry as a publish carries it: its hash (entry_hash), INDEX_HASH_CHARS letters
Hashes = str   # a message's entries: their hashes one after the other ("": none)

def entry_count(text: str) -> int:
    """How many entries an entries string (entries_text) holds."""
    return (text.count("\0") + 1) // 2 if text else 0


def capped(text: str) -> str:
    """The first MAX_ENTRIES entries of an entries string: a schedule's tick, whose payload was
    checked when the schedule was written, may meet fields declared after that."""
    if entry_count(text) <= MAX_ENTRIES:
        return text
    return "\0".join(text.split("\0")[:2 * MAX_ENTRIES])


# An entry's hash: 8 letters a..p, the CRC-32 of "<slot>\0<text>" in hex with a..p for 0..f (a
# log of 1,000,000 entries holds a chance copy of a given hash about once in 4,000 queries: an
# extra candidate the search drops). Not a cryptographic hash, and it need not be: whoever can
# publish can add candidates anyway, and a candidate is only ever a message the search then
# checks. zlib's CRC is C and costs ~0.4 us an entry where blake2b cost ~1.9 (an indexed field of
# unique values, an order id, hashes every one). It must never change without a rebuild of every
# index (test_indexes pins it).
HEX_LETTERS = bytes.maketrans(b"0123456789abcdef", b"abcdefghijklmnop")


def entry_hash(slot: int | str, text: str) -> Hashed:
    """The hash of the entry ``text`` of field ``slot``: the letters it is found by in the log.
    (A publish caches it: publish_entries._HASHED.)"""
    try:
        data = text.encode()                  # text that is valid UTF-8: the quick way
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogateescape")
    return _from_crc(zlib.crc32(data, slot_crc(str(slot))))   # the CRC of "<slot>\0<text>"


_SLOT_CRCS: dict[str, int] = {}


def slot_crc(slot: str) -> int:
    """The CRC-32 of "<slot>\0", which an entry's CRC continues (zlib.crc32's second argument)."""
    crc = _SLOT_CRCS.get(slot)
    if crc is None:
        crc = _SLOT_CRCS[slot] = zlib.crc32(f"{slot}\0".encode())
    return crc


def _from_crc(crc: int) -> Hashed:
    return binascii.hexlify(crc.to_bytes(4, "big")).translate(HEX_LETTERS).decode()


def hashes_of(text: str) -> Hashes:
    """The hashes (entry_hash) of an entries string (entries_text), each once: two texts of a list
    may share a hash, as a publish (which keeps each hash of a list once) writes it."""
    parts = text.split("\0") if text else []
    return "".join(dict.fromkeys(entry_hash(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)))


class HashBlock(Sequence):
    """The Hashes of a call's messages when each has exactly one entry, as one string (a column
    of new values hashed at once: publish_entries._hash_column), so a publish passes it on whole
    instead of cutting it into a string a message and joining them again. ``block[i]`` is
    message i's; ``part(start, stop)`` those of a run of messages."""

    __slots__ = ("letters",)

    def __init__(self, letters: str) -> None:
        self.letters = letters

    def __len__(self) -> int:
        return len(self.letters) // INDEX_HASH_CHARS

    def __getitem__(self, i: int) -> Hashes:
        if not 0 <= i < len(self):
            raise IndexError(i)        # (which ends iter(): a Sequence iterates by index)
        return self.letters[i * INDEX_HASH_CHARS:(i + 1) * INDEX_HASH_CHARS]

    def part(self, start: int, stop: int) -> "HashBlock":
        return HashBlock(self.letters[start * INDEX_HASH_CHARS:stop * INDEX_HASH_CHARS])


def _log_parts(ids: list[str], hashes: list[Hashes] | HashBlock) -> tuple[str, str]:
    """The log's two strings for messages ``ids`` (their Hashes, in the same order): every hash,
    and each message's id once for each of its hashes (includes/index.lua). Two joins where each
    message has one entry (the usual call: ~2 us for 250 messages)."""
    if type(hashes) is HashBlock:
        return hashes.letters, "".join(ids)
    letters = "".join(hashes)
    if len(letters) == INDEX_HASH_CHARS * len(ids) and min(map(len, hashes), default=0) == INDEX_HASH_CHARS:
        return letters, "".join(ids)
    return letters, "".join(map(operator.mul, ids, [len(h) // INDEX_HASH_CHARS for h in hashes]))


def entries_blob(ids: list[str], hashes: list[Hashes]) -> str:
    """The log entries of messages ``ids`` (their hashes, in the same order) as one argument of a
    script: "<hashes>:<ids>", '' when there are none (includes/index.lua index_pair)."""
    letters, id_text = _log_parts(ids, hashes)
    return f"{letters}:{id_text}" if letters else ""


def entries_args(ids: list[str], hashes: list[Hashes]) -> list[str]:
    """The same entries as a publish passes them (lua/publish.lua ARGV[14]): '@', the hashes and
    the ids, which the script appends as they are (a blob it would cut in two: a copy of every
    byte in Lua). [""] when there are none."""
    letters, id_text = _log_parts(ids, hashes)
    return ["@", letters, id_text] if letters else [""]


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
