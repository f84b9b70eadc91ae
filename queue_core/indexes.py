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
  entries_blob): a query looks its value's hash up, so the log says only which messages *may*
  match, and the search checks every candidate against the whole query.
"""

import binascii
import itertools
import json
import math
import re
import struct
import zlib
from functools import lru_cache
from typing import Any

from .errors import InvalidArgument
from .keys import INDEX_SHARDS
from .query import MAX_PATH_SEGMENTS, MAX_VALUE_CHARS, PATH_FIELDS, at_path, scalar_text

MAX_INDEXES = 4
MAX_ENTRIES = 256   # index entries one message may have (publish refuses more; see index_texts)
_FIELD = re.compile(rf"^(payload|header)((?:\.[A-Za-z0-9_$@-]+){{1,{MAX_PATH_SEGMENTS}}})$")
_NUMBER = re.compile(r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$")


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


_EXACT = 10 ** 15   # ints below this (in size) are exact doubles, and canonical_number writes them whole


def canonical_number(value: float) -> str:
    """The one text of a number: whole numbers without a fraction, others as Python's repr."""
    if value == int(value) and abs(value) < _EXACT:
        return str(int(value))
    return repr(float(value))


def entry_text(value: Any) -> str | None:
    """The index text of one JSON scalar (None: not indexed)."""
    if type(value) is int and -_EXACT < value < _EXACT:
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


_SCALARS = (str, int, float, bool, type(None))
# The key texts json.dumps may write for a key that is not text (1, 1.5, True, None, inf): where a
# path segment could be one of them, a dict on the way must have text keys only (_plain_at).
_KEY_TEXT = re.compile(r"^(-?[0-9][0-9.e+-]*|true|false|null|-?Infinity|NaN)$")


class _NotPlain(Exception):
    """An object whose JSON text might read differently at a path than the object does."""


def _plain_at(value: Any, path: tuple[str, ...], risky: tuple[bool, ...]) -> tuple[bool, Any]:
    """at_path on a payload object as publish writes it (compact json.dumps), where the answer is
    sure to be at_path's on the JSON read back: dicts (whose keys are all text where a segment
    reads like a key json.dumps writes for a number, a bool or None: {"1": a, 1: b} reads back as
    b), lists, and scalars of exactly the JSON types. Anything else raises _NotPlain: the caller
    reads the JSON instead. ``risky``: per segment, whether it could be such a key (_plan)."""
    for n, seg in enumerate(path):
        kind = type(value)
        if kind is dict:
            if risky[n] and any(type(k) is not str for k in value):
                raise _NotPlain
            if seg not in value:
                return False, None
            value = value[seg]
        elif kind is list:
            if not (seg.isdigit() and int(seg) < len(value)):
                return False, None
            value = value[int(seg)]
        elif kind in _SCALARS:
            return False, None
        else:
            raise _NotPlain
    kind = type(value)
    if kind is list:
        for v in value:
            if type(v) not in _SCALARS and type(v) not in (list, dict):
                raise _NotPlain
    elif kind is not dict and kind not in _SCALARS:
        raise _NotPlain
    return True, value


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


_NO_OBJECT = object()


def entries_text(fields: tuple[tuple[int, str], ...], payload: bytes, headers: dict | None) -> str:
    """A message's entries: "<slot>\\0<text>" pairs joined by NUL."""
    names = tuple(f for _, f in fields)
    return "\0".join(f"{fields[i - 1][0]}\0{text}" for i, text in entries(names, parse_json(payload), headers))


@lru_cache(maxsize=64)
def _plan(fields: tuple[tuple[int, str], ...]) -> tuple[tuple[str, str, tuple[str, ...], tuple[bool, ...]], ...]:
    """(slot as text, "payload" | "header", path, per segment whether _plain_at must look at the
    keys) of each declared field."""
    out = []
    for slot, f in fields:
        kind, path = parse_field(f)
        out.append((str(slot), kind, path, tuple(bool(_KEY_TEXT.match(seg)) for seg in path)))
    return tuple(out)


Hashed = tuple[int, str]   # an entry as a publish carries it: (shard, hash), entry_hash

# The hashed entries of one scalar: (slot, type) -> {value: ()} or {value: (entry,)}. Values
# repeat across messages (a customer id); keyed by type too, as 1, 1.0 and True are equal keys
# with other texts. Tuples, so a message with one indexed field shares its value's. A publish's
# quick way caches a value the second time it meets it (_hash_column; _SEEN: the values met once).
_HASHED: dict[tuple[str, type], dict[Any, tuple[Hashed, ...]]] = {}
_SEEN: dict[tuple[str, type], set] = {}
_HASHED_MOST = 16384   # values a (slot, type) keeps, and has seen, at most (<= ~3.5 MB of text each)


def _hashed(slot: str, value: Any, cache: dict | None = None) -> tuple[Hashed, ...]:
    """The hashed entries of one scalar of field ``slot``: one, or none (not indexed). ``cache``:
    its (slot, type)'s, when the caller has it and looked the value up there already."""
    kind = type(value)
    h = None
    if cache is None:
        cache = _HASHED.get((slot, kind))
        if cache is None:
            cache = _HASHED[(slot, kind)] = {}
        h = cache.get(value)
    if h is None:
        text = entry_text(value)
        h = () if text is None else (entry_hash(slot, text),)
        if kind is str and len(value) > MAX_VALUE_CHARS:
            return h          # never indexed, and a payload may hold megabytes of it: not kept
        if len(cache) >= _HASHED_MOST:
            cache.clear()
        cache[value] = h
    return h


_NUMBER_START = re.compile("(?:^|\0)[-0-9]")   # where a text of a NUL-joined list may read as a number
# A text that reads as a whole number and is already that number's index text (canonical_number:
# a string order number, "1042"): hashed as it is.
_WHOLE_TEXT = re.compile(r"(?:0|[1-9][0-9]{0,14})\Z")


# A CRC's shard (crc * INDEX_SHARDS >> 32) from its top byte: exact where INDEX_SHARDS divides 256
_SHARD_OF_TOP_BYTE = bytes(top * INDEX_SHARDS >> 8 for top in range(256))
if 256 % INDEX_SHARDS:
    raise RuntimeError("INDEX_SHARDS must divide 256: _hash_column reads a shard off a CRC's top byte")
_EIGHT = re.compile("........")


def _fresh_many(slot: str, values: list, by_type: dict) -> list[tuple[Hashed, ...]]:
    """[_hashed(slot, v) for v in values] for values not cached. A field of unique values (an
    order id) hashes every value of every publish: the plain ones (ints a double holds exactly,
    whose index text is str()'s, and text that does not read as a number or is a whole number's
    own index text, "1042") are hashed a list at a time (_hash_column); the others (another
    number-like text, a float, a bool, None, a long text) one by one."""
    kinds = set(map(type, values))
    if kinds == {int} and min(values) > -_EXACT and max(values) < _EXACT:
        return _hash_column(slot, values, "\0".join(map(str, values)), by_type[int])
    if kinds == {str} and max(map(len, values)) <= MAX_VALUE_CHARS:
        texts = "\0".join(values)
        if texts.count("\0") == len(values) - 1 and not _NUMBER_START.search(texts):
            return _hash_column(slot, values, texts, by_type[str])
    # Some value needs a closer look: the plain ones still go a list at a time.
    out: list = [None] * len(values)
    plain: dict[type, list[int]] = {int: [], str: []}
    for i, v in enumerate(values):
        kind = type(v)
        if (kind is int and -_EXACT < v < _EXACT
                or kind is str and len(v) <= MAX_VALUE_CHARS and "\0" not in v
                and (not _NUMBER.match(v) or _WHOLE_TEXT.match(v))):
            plain[kind].append(i)
        else:
            out[i] = _hashed(slot, v, by_type[kind])
    for kind, at in plain.items():
        if at:
            column = [values[i] for i in at]
            texts = "\0".join(column) if kind is str else "\0".join(map(str, column))
            for i, h in zip(at, _hash_column(slot, column, texts, by_type[kind]), strict=True):
                out[i] = h
    return out


def _hash_column(slot: str, values: list, texts: str, cache: dict) -> list[tuple[Hashed, ...]]:
    """The hashed entries of ``values`` (of one type, each plain: _fresh_many), whose index texts
    are ``texts`` joined by NUL (none holds one): one join, map(zlib.crc32), one hexlify and one
    translate for the list, the pairs built by zip. Each value is cached the second time it is
    met, not the first (_SEEN): a field of unique values would fill the cache with values never
    asked for again, which cost more than hashing them (a dict insert, a clear each
    _HASHED_MOST, the garbage collector walking the cache: ~0.4-0.7 us a message)."""
    try:
        data = texts.encode()
    except UnicodeEncodeError:         # a lone surrogate (a publish's to_bytes refuses those first)
        return [_hashed(slot, v, cache) for v in values]
    crcs = list(map(zlib.crc32, data.split(b"\0"), itertools.repeat(_slot_crc(slot))))
    packed = struct.pack(f">{len(crcs)}I", *crcs)
    letters = binascii.hexlify(packed).translate(_HEX_LETTERS).decode()
    out = list(zip(zip(packed[::4].translate(_SHARD_OF_TOP_BYTE), _EIGHT.findall(letters), strict=True)))
    key = (slot, type(values[0]))
    seen = _SEEN.get(key)
    if seen is None:
        seen = _SEEN[key] = set()
    fresh = set(values)
    if again := fresh & seen:
        if len(cache) + len(again) > _HASHED_MOST:
            cache.clear()
        cache.update((v, h) for v, h in zip(values, out, strict=True) if v in again)   # (<= _HASHED_MOST: seen)
    if len(seen) + len(fresh) > _HASHED_MOST:
        seen.clear()
    seen.update(itertools.islice(fresh, _HASHED_MOST - len(seen)))
    return out


def _clear_caches() -> None:
    """Forget every cached and seen value (tests)."""
    for cache in (*_HASHED.values(), *_SEEN.values()):
        cache.clear()


def _hashed_at(slot: str, value: Any, out: list[Hashed]) -> None:
    """Add the hashed entries of the value found at a field's path (as entries() takes it)."""
    if isinstance(value, list):
        seen = set()
        for v in value:
            if not isinstance(v, list | dict):
                for h in _hashed(slot, v):
                    if h not in seen:
                        seen.add(h)
                        out.append(h)
    elif not isinstance(value, dict):
        out += _hashed(slot, value)


def message_hashes(fields: tuple[tuple[int, str], ...], payload: bytes, headers: dict | None,
                   obj: Any = _NO_OBJECT) -> list[Hashed]:
    """The hashed entries of one message (entry_hash; the same entries as entries(), which
    says what they are; the header fields' last). ``obj``: the object ``payload`` was serialised
    from (to_bytes), read instead of parsing the JSON when it is plain (a dict or list of JSON
    types: _plain_at), so a publish of dicts decodes nothing."""
    plan = _plan(fields)
    return list(_message_hashes(plan, payload, obj, _header_hashes(plan, headers)))


def _header_hashes(plan, headers: dict | None) -> tuple[Hashed, ...]:
    """The header fields' hashed entries (a call's messages share their headers)."""
    out: list[Hashed] = []
    for slot, kind, path, _risky in plan:
        if kind != "payload":
            found, value = at_path(headers or {}, path)
            if found:
                _hashed_at(slot, value, out)
    return tuple(out)


def _message_hashes(plan, payload: bytes, obj: Any, header_part: tuple[Hashed, ...]) -> tuple[Hashed, ...]:
    plain, src = (True, obj) if type(obj) is dict or type(obj) is list else (False, _NO_OBJECT)
    out: list[Hashed] = []
    for slot, kind, path, risky in plan:
        if kind != "payload":
            continue
        if plain:
            try:
                found, value = _plain_at(src, path, risky)
            except _NotPlain:
                plain, src = False, parse_json(payload)
                found, value = at_path(src, path)
        else:
            if src is _NO_OBJECT:
                src = parse_json(payload)
            found, value = at_path(src, path)
        if found:
            _hashed_at(slot, value, out)
    return (*out, *header_part)


@lru_cache(maxsize=64)
def _quick_plan(plan) -> tuple[tuple[str, tuple[str, ...], dict], ...] | None:
    """(slot, path, {scalar type: its _HASHED cache}) of each payload field when every one can be
    walked by hashed_entries' quick loop (no segment that reads like a key json.dumps writes for a
    number, a bool or None)."""
    payload = [(slot, path, risky) for slot, kind, path, risky in plan if kind == "payload"]
    if not payload or any(any(risky) for _, _, risky in payload):
        return None
    return tuple((slot, path, {kind: _HASHED.setdefault((slot, kind), {}) for kind in _SCALARS})
                 for slot, path, _ in payload)


def hashed_entries(topic: str, fields: tuple[tuple[int, str], ...], items: list[bytes], which,
                   headers: dict | None, objects: list | None = None) -> list[tuple[Hashed, ...] | None] | None:
    """The message_hashes of items[i] at [i] for each i of ``which``, None at the others
    (``objects[i]``: what items[i] was serialised from, when the caller has it; None: the topic
    declares no indexed field). A message with more than MAX_ENTRIES entries is refused
    (InvalidArgument): each is written by the publish's one script call and read by every query
    of its shard, so a payload whose indexed field is a list of 100,000 values would grow the log
    by megabytes at once."""
    if not fields:
        return None
    plan = _plan(fields)
    header_part = _header_hashes(plan, headers)
    # The usual publish: dicts whose indexed paths lead through dicts to one scalar each, whose
    # entries are cached by value (_HASHED). Read a field at a time over the call's messages (a
    # comprehension a segment: no Python call and few instructions a message); a message for which
    # that cannot say (a list or another type on the way, a risky segment, no object) goes the
    # general way, which says the same (tests/queue_core/test_indexes.py).
    quick = _quick_plan(plan) if objects is not None else None
    which = list(which)
    every = which == list(range(len(items)))   # the usual call: all of them, in order
    if quick:
        values = objects if every else [objects[i] for i in which]
        columns = [_quick_column(slot, path, by_type, values) for slot, path, by_type in quick]
        found_all = columns[0] if len(columns) == 1 else [
            None if None in parts else sum(parts, ()) for parts in zip(*columns, strict=True)]
    else:
        found_all = [None] * len(which)
    if header_part:
        found_all = [None if f is None else f + header_part for f in found_all]
    if every:
        out = found_all
    else:
        out = [None] * len(items)
        for i, found in zip(which, found_all, strict=True):
            out[i] = found
    if None in found_all or len(quick or ()) + len(header_part) > MAX_ENTRIES:
        for i in which:
            found = out[i]
            if found is None:
                found = out[i] = _message_hashes(plan, items[i], _NO_OBJECT if objects is None else objects[i],
                                                 header_part)
            if len(found) > MAX_ENTRIES:
                raise InvalidArgument(f"message {i + 1} of the call has {len(found):,} values in topic {topic!r}'s "
                                      f"indexed fields; a message may have at most {MAX_ENTRIES} (each element "
                                      f"of a list is one): shorten the list or index another field")
    return out


_NOT_PLAIN = object()
_MISS = object()


def _quick_column(slot: str, path: tuple[str, ...], by_type: dict, values: list) -> list:
    """The hashed entries of field ``slot`` of each of ``values`` (published objects) as far as
    the quick way can say: () when the path is not there, None when the general way must look
    (something else than a dict on the way, or than a scalar at the end)."""
    for seg in path:
        values = [v.get(seg, _NO_OBJECT) if type(v) is dict else v if v is _NO_OBJECT else _NOT_PLAIN
                  for v in values]
    get = by_type.get
    out = [c.get(v, _MISS) if (c := get(type(v))) is not None else () if v is _NO_OBJECT else None for v in values]
    if _MISS in out:   # values not cached: a field of unique values (an order id) has only such
        missed = [i for i, h in enumerate(out) if h is _MISS]
        if len(missed) == len(out):
            return _fresh_many(slot, values, by_type)
        for i, h in zip(missed, _fresh_many(slot, [values[i] for i in missed], by_type), strict=True):
            out[i] = h
    return out


def entry_count(text: str) -> int:
    """How many entries an entries string (entries_text) holds."""
    return (text.count("\0") + 1) // 2 if text else 0


def capped(text: str) -> str:
    """The first MAX_ENTRIES entries of an entries string: a schedule's tick, whose payload was
    checked when the schedule was written, may meet fields declared after that."""
    if entry_count(text) <= MAX_ENTRIES:
        return text
    return "\0".join(text.split("\0")[:2 * MAX_ENTRIES])


# An entry's hash: 8 letters a..p, the CRC-32 of "<slot>\0<text>" in hex with a..p for 0..f; its
# shard is the CRC's top 3 bits, so the 29 others tell the values of one shard apart (a shard of
# 125,000 entries, 1,000,000 messages, holds a chance copy of a given hash about once in 4,000
# queries: an extra candidate the search drops). Not a cryptographic hash, and it need not be:
# whoever can publish can add candidates anyway, and a candidate is only ever a message the search
# then checks. zlib's CRC is C and costs ~0.4 us an entry where blake2b cost ~1.9 (an indexed
# field of unique values, an order id, hashes every one). It must never change without a
# rebuild of every index (test_indexes pins it). No id holds a lowercase letter (Crockford base32
# digits, then ".<partition>"), so a hash found anywhere in the log is an entry's start, and a
# scan looks for the hash alone.
_HEX_LETTERS = bytes.maketrans(b"0123456789abcdef", b"abcdefghijklmnop")


def entry_hash(slot: int | str, text: str) -> tuple[int, str]:
    """(shard, hash) of the entry ``text`` of field ``slot``: the log string it is appended to
    (keys.index_log_keys) and the letters it is found by. (A publish looks it up in _HASHED.)"""
    try:
        data = text.encode()                  # text that is valid UTF-8: the quick way
    except UnicodeEncodeError:
        data = text.encode("utf-8", "surrogateescape")
    return _from_crc(zlib.crc32(data, _slot_crc(str(slot))))   # the CRC of "<slot>\0<text>"


_SLOT_CRCS: dict[str, int] = {}


def _slot_crc(slot: str) -> int:
    """The CRC-32 of "<slot>\0", which an entry's CRC continues (zlib.crc32's second argument)."""
    crc = _SLOT_CRCS.get(slot)
    if crc is None:
        crc = _SLOT_CRCS[slot] = zlib.crc32(f"{slot}\0".encode())
    return crc


def _from_crc(crc: int) -> Hashed:
    return crc * INDEX_SHARDS >> 32, binascii.hexlify(crc.to_bytes(4, "big")).translate(_HEX_LETTERS).decode()


def hashes_of(text: str) -> list[tuple[int, str]]:
    """The hashed entries (entry_hash) of an entries string (entries_text), each once: two texts
    of a list may share a hash, as a publish (which keeps each hash of a list once) writes it."""
    parts = text.split("\0") if text else []
    return list(dict.fromkeys(entry_hash(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)))


def entries_blob(ids: list[str], hashes: list[list[tuple[int, str]]]) -> str:
    """The log entries of messages ``ids`` (their hashed entries, in the same order), as a script
    appends them: "<shard>:<length>:<entries>" per shard, each entry "<hash><id>\n"
    (includes/index.lua)."""
    shards: list[list[str]] = [[] for _ in range(INDEX_SHARDS)]
    for msg_id, found in zip(ids, hashes, strict=True):
        for shard, letters in found:
            shards[shard].append(letters + msg_id)
    out = []
    for shard, chunk in enumerate(shards):
        if chunk:
            chunk.append("")                  # so the join ends the last entry with its newline
            joined = "\n".join(chunk)
            out.append(f"{shard}:{len(joined)}:{joined}")
    return "".join(out)


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
