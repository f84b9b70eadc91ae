"""The index entries of a publish's messages, computed fast (issue 36 point 3). What an entry is
stays in queue_core/indexes.py; this module computes the same entries for a call of messages
from the objects they were serialised from: without parsing the JSON where an object reads as its
JSON does (_plain_at), a field at a time over the call (_quick_column), each value's hashed
entries cached once it repeats, and the values not cached hashed a list at a time
(_fresh_many). A message's entries are its hashes one after the other in one string (Hashes:
indexes.entries_args joins a call's with no work a message). tests/queue_core/test_publish_entries.py
checks that both ways agree."""

import binascii
import itertools
import re
import struct
import zlib
from functools import lru_cache
from typing import Any

from .errors import InvalidArgument
from .indexes import (
    EXACT,
    HEX_LETTERS,
    MAX_ENTRIES,
    NUMBER,
    HashBlock,
    Hashed,
    Hashes,
    entry_hash,
    entry_text,
    parse_field,
    parse_json,
    slot_crc,
)
from .keys import INDEX_HASH_CHARS
from .query import MAX_VALUE_CHARS, at_path

_SCALARS = (str, int, float, bool, type(None))
MAX_HASH_CHARS = MAX_ENTRIES * INDEX_HASH_CHARS   # a message's Hashes at most
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


_NO_OBJECT = object()


@lru_cache(maxsize=64)
def _plan(fields: tuple[tuple[int, str], ...]) -> tuple[tuple[str, str, tuple[str, ...], tuple[bool, ...]], ...]:
    """(slot as text, "payload" | "header", path, per segment whether _plain_at must look at the
    keys) of each declared field."""
    out = []
    for slot, f in fields:
        kind, path = parse_field(f)
        out.append((str(slot), kind, path, tuple(bool(_KEY_TEXT.match(seg)) for seg in path)))
    return tuple(out)


# The hashed entries of one scalar: (slot, type) -> {value: "" or its hash}. Values repeat across
# messages (a customer id); keyed by type too, as 1, 1.0 and True are equal keys with other
# texts. A message with one indexed field shares its value's string. A publish's
# quick ways cache a value the second time they meet it (_hash_column, _met; _SEEN: the values met
# once).
_HASHED: dict[tuple[str, type], dict[Any, Hashes]] = {}
_SEEN: dict[tuple[str, type], set] = {}
_HASHED_MOST = 16384   # values a (slot, type) keeps, and has seen, at most (<= ~3.5 MB of text each)
# Once FRESH_STREAK calls in a row of a topic's field hashed a whole column of new plain values
# (a field of unique values, an order id), its calls hash their column without looking each value
# up or noting it as seen (~0.1-0.2 us a message in a publish: the seen set is large and cold
# between round trips), but for every FRESH_STREAK-th call, which looks again: a value met again
# or found cached ends the streak (_quick_column). Columns that need a closer look (_fresh_many:
# a text that reads like a number, an int past EXACT) neither count nor skip.
FRESH_STREAK = 8
_STREAKS: dict[tuple[str, str], list[int]] = {}   # (topic, slot) -> [its count] (_streak)


def _entries_of(slot: str, value: Any) -> Hashes:
    """The hashed entries of one scalar of field ``slot``, not cached: one, or none."""
    text = entry_text(value)
    return "" if text is None else entry_hash(slot, text)


def _hashed(slot: str, value: Any, cache: dict | None = None) -> Hashes:
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
        h = _entries_of(slot, value)
        if kind is str and len(value) > MAX_VALUE_CHARS:
            return h          # never indexed, and a payload may hold megabytes of it: not kept
        if len(cache) >= _HASHED_MOST:
            cache.clear()
        cache[value] = h
    return h


# Where a text of a NUL-joined list may read as a number (searched in "\0" + the list: a literal
# first lets the search skip from NUL to NUL; "(?:^|\0)[-0-9]" cost ~0.13 us a message, 15x this).
_NUMBER_START = re.compile("\0[-0-9]")
# A text that reads as a whole number and is already that number's index text (canonical_number:
# a string order number, "1042"): hashed as it is.
_WHOLE_TEXT = re.compile(r"(?:0|[1-9][0-9]{0,14})\Z")


_EIGHT = re.compile("........")


def _fresh_many(slot: str, values: list, by_type: dict, streak: list[int] | None = None,
                block: bool = False) -> list[Hashes] | HashBlock:
    """[_hashed(slot, v) for v in values] for values not cached. A field of unique values (an
    order id) hashes every value of every publish: the plain ones (ints a double holds exactly,
    whose index text is str()'s, and text that does not read as a number or is a whole number's
    own index text, "1042") are hashed a list at a time (_hash_column); the others (another
    number-like text, a float, a bool, None, a long text) one by one. ``streak``: the field's
    FRESH_STREAK count, which a plain column counts (_hash_column); ``block``: a plain column may
    come back as a HashBlock."""
    out = _plain_column(slot, values, by_type, streak, block=block)
    if out is not None:
        return out
    # Some value needs a closer look: the plain ones still go a list at a time.
    out: list = [None] * len(values)
    plain: dict[type, list[int]] = {int: [], str: []}
    for i, v in enumerate(values):
        kind = type(v)
        if (kind is int and -EXACT < v < EXACT
                or kind is str and len(v) <= MAX_VALUE_CHARS and "\0" not in v
                and (not NUMBER.match(v) or _WHOLE_TEXT.match(v))):
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


def _plain_column(slot: str, values: list, by_type: dict, streak: list[int] | None,
                  note: bool = True, block: bool = False) -> list[Hashes] | HashBlock | None:
    """_hash_column of ``values`` when they are plain ints or plain texts all (_fresh_many), else
    None."""
    kinds = set(map(type, values))
    if kinds == {int} and min(values) > -EXACT and max(values) < EXACT:
        # (str() of each joined costs ~1.6x one %-format of them all: the ints are exactly int.)
        texts = ("%d\0" * len(values))[:-1] % tuple(values)
        return _hash_column(slot, values, texts, by_type[int], streak, note, block)
    if kinds == {str} and max(map(len, values)) <= MAX_VALUE_CHARS:
        texts = "\0".join(values)
        if texts.count("\0") == len(values) - 1 and not _NUMBER_START.search("\0" + texts):
            return _hash_column(slot, values, texts, by_type[str], streak, note, block)
    return None


def _hash_column(slot: str, values: list, texts: str, cache: dict, streak: list[int] | None = None,
                 note: bool = True, block: bool = False) -> list[Hashes] | HashBlock:
    """The hashed entries of ``values`` (of one type, each plain: _fresh_many), whose index texts
    are ``texts`` joined by NUL (none holds one): one join, map(zlib.crc32), one hexlify and one
    translate for the list, cut into each value's letters by one findall. Each value is cached the second time it is
    met, not the first (_SEEN): a field of unique values would fill the cache with values never
    asked for again, which cost more than hashing them (a dict insert, a clear each
    _HASHED_MOST, the garbage collector walking the cache: ~0.4-0.7 us a message). ``note``:
    False for a call in a field's FRESH_STREAK, which notes nothing; ``streak``: the field's
    count, which a value met again ends; ``block``: the answer as a HashBlock (each value has one
    entry), not cut a value at a time."""
    try:
        data = texts.encode()
    except UnicodeEncodeError:         # a lone surrogate (a publish's to_bytes refuses those first)
        return [_hashed(slot, v, cache) for v in values]
    crcs = list(map(zlib.crc32, data.split(b"\0"), itertools.repeat(slot_crc(slot))))
    packed = struct.pack(f">{len(crcs)}I", *crcs)
    letters = binascii.hexlify(packed).translate(HEX_LETTERS).decode()
    out = HashBlock(letters) if block else _EIGHT.findall(letters)
    if not note:
        return out
    key = (slot, type(values[0]))
    seen = _SEEN.get(key)
    if seen is None:
        seen = _SEEN[key] = set()
    fresh = set(values)
    again = fresh & seen
    if streak is not None:
        streak[0] = 0 if again else streak[0] + 1
    if again:
        if len(cache) + len(again) > _HASHED_MOST:
            cache.clear()
        cache.update((v, out[i]) for i, v in enumerate(values) if v in again)   # (<= _HASHED_MOST: seen)
    if len(seen) + len(fresh) > _HASHED_MOST:
        seen.clear()
    seen.update(itertools.islice(fresh, _HASHED_MOST - len(seen)))
    return out


def _clear_caches() -> None:
    """Forget every cached and seen value (tests)."""
    for cache in (*_HASHED.values(), *_SEEN.values()):
        cache.clear()
    _STREAKS.clear()


def _hashed_at(slot: str, value: Any, out: list[Hashed]) -> None:
    """Add the hashed entries of the value found at a field's path (as entries() takes it)."""
    if isinstance(value, list):
        seen = set()
        for v in value:
            if not isinstance(v, list | dict):
                h = _hashed(slot, v)
                if h and h not in seen:
                    seen.add(h)
                    out.append(h)
    elif not isinstance(value, dict):
        h = _hashed(slot, value)
        if h:
            out.append(h)


def message_hashes(fields: tuple[tuple[int, str], ...], payload: bytes, headers: dict | None,
                   obj: Any = _NO_OBJECT) -> Hashes:
    """The hashed entries of one message (entry_hash; the same entries as entries(), which
    says what they are; the header fields' last). ``obj``: the object ``payload`` was serialised
    from (to_bytes), read instead of parsing the JSON when it is plain (a dict or list of JSON
    types: _plain_at), so a publish of dicts decodes nothing."""
    plan = _plan(fields)
    return _message_hashes(plan, payload, obj, _header_hashes(plan, headers))


def _header_hashes(plan, headers: dict | None) -> Hashes:
    """The header fields' hashed entries (a call's messages share their headers)."""
    out: list[Hashed] = []
    for slot, kind, path, _risky in plan:
        if kind != "payload":
            found, value = at_path(headers or {}, path)
            if found:
                _hashed_at(slot, value, out)
    return "".join(out)


def _message_hashes(plan, payload: bytes, obj: Any, header_part: Hashes) -> Hashes:
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
    return "".join(out) + header_part


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


def _streak(topic: str, slot: str) -> list[int]:
    """The FRESH_STREAK count of a topic's field (a slot is never reused for another field)."""
    count = _STREAKS.get((topic, slot))
    if count is None:
        if len(_STREAKS) >= 4096:
            _STREAKS.clear()
        count = _STREAKS[(topic, slot)] = [0]
    return count


def hashed_entries(topic: str, fields: tuple[tuple[int, str], ...], items: list[bytes], which,
                   headers: dict | None, objects: list | None = None) -> list[Hashes | None] | None:
    """The message_hashes of items[i] at [i] for each i of ``which``, None at the others
    (``objects[i]``: what items[i] was serialised from, when the caller has it; None: the topic
    declares no indexed field). A message with more than MAX_ENTRIES entries is refused
    (InvalidArgument): each is written by the publish's one script call and read by every query
    of the topic, so a payload whose indexed field is a list of 100,000 values would grow the log
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
    if quick and which == [0] and len(items) == 1:      # publish(): one message, few lists made
        found = _quick_one(quick, objects[0])
        if found is not None and len(found) + len(header_part) <= MAX_HASH_CHARS:   # (a header's
            return [found + header_part]                 # list may hold too many: refused below)
    every = which == list(range(len(items)))   # the usual call: all of them, in order
    if quick and every and len(quick) == 1 and not header_part:
        # One payload field: a column of new plain values comes back whole (a HashBlock), as
        # entries_args takes it.
        slot, path, by_type = quick[0]
        column = _quick_column(slot, path, by_type, _streak(topic, slot), objects, block=True)
        if type(column) is HashBlock:
            return column
        quick = ()
        found_all = column
    elif quick:
        values = objects if every else [objects[i] for i in which]
        columns = [_quick_column(slot, path, by_type, _streak(topic, slot), values) for slot, path, by_type in quick]
        found_all = columns[0] if len(columns) == 1 else [
            None if None in parts else "".join(parts) for parts in zip(*columns, strict=True)]
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
    if None in found_all or len(quick or ()) * INDEX_HASH_CHARS + len(header_part) > MAX_HASH_CHARS:
        for i in which:
            found = out[i]
            if found is None:
                found = out[i] = _message_hashes(plan, items[i], _NO_OBJECT if objects is None else objects[i],
                                                 header_part)
            if len(found) > MAX_HASH_CHARS:
                raise InvalidArgument(f"message {i + 1} of the call has {len(found) // INDEX_HASH_CHARS:,} values in "
                                      f"topic {topic!r}'s "
                                      f"indexed fields; a message may have at most {MAX_ENTRIES} (each element "
                                      f"of a list is one): shorten the list or index another field")
    return out


_NOT_PLAIN = object()
_MISS = object()


def _quick_one(quick, obj: Any) -> Hashes | None:
    """_quick_column's answer for one message's object, each payload field's entries joined
    (None: the general way must look), without a list made a step: a publish() of one message."""
    out = ""
    for slot, path, by_type in quick:
        value = obj
        for seg in path:
            if type(value) is dict:
                value = value.get(seg, _NO_OBJECT)
            elif value is not _NO_OBJECT:
                return None
        cache = by_type.get(type(value))
        if cache is None:
            if value is _NO_OBJECT:
                continue
            return None
        found = cache.get(value, _MISS)
        out += _met(slot, value, cache) if found is _MISS else found
    return out


def _met(slot: str, value: Any, cache: dict) -> Hashes:
    """The hashed entries of a scalar not in ``cache`` (its (slot, type)'s), cached the second
    time it is met, as a call's column caches them (_hash_column)."""
    seen = _SEEN.setdefault((slot, type(value)), set())
    if value in seen:
        return _hashed(slot, value, cache)   # (which caches it)
    if not (type(value) is str and len(value) > MAX_VALUE_CHARS):   # (never kept: megabytes, maybe)
        if len(seen) >= _HASHED_MOST:
            seen.clear()
        seen.add(value)
    return _entries_of(slot, value)


def _quick_column(slot: str, path: tuple[str, ...], by_type: dict, streak: list[int], values: list,
                  block: bool = False) -> list | HashBlock:
    """The hashed entries of field ``slot`` of each of ``values`` (published objects) as far as
    the quick way can say: "" when the path is not there, None when the general way must look
    (something else than a dict on the way, or than a scalar at the end). ``streak``: the
    field's FRESH_STREAK count; ``block``: a column of new plain values may come back as a
    HashBlock."""
    for seg in path:
        values = [v.get(seg, _NO_OBJECT) if type(v) is dict else v if v is _NO_OBJECT else _NOT_PLAIN
                  for v in values]
    calls = streak[0]
    if calls >= FRESH_STREAK and calls % FRESH_STREAK:
        out = _plain_column(slot, values, by_type, None, note=False, block=block)   # none looked up or noted
        if out is not None:
            streak[0] = calls + 1
            return out
    get = by_type.get
    out = [c.get(v, _MISS) if (c := get(type(v))) is not None else "" if v is _NO_OBJECT else None for v in values]
    if _MISS not in out:
        if any(out):              # a value found cached: not a field of unique values
            streak[0] = 0
        return out
    # Values not cached: a field of unique values (an order id) has only such.
    missed = [i for i, h in enumerate(out) if h is _MISS]
    if len(missed) == len(out):
        return _fresh_many(slot, values, by_type, streak, block)
    if any(h is not _MISS and h for h in out):
        streak[0] = 0
    for i, h in zip(missed, _fresh_many(slot, [values[i] for i in missed], by_type), strict=True):
        out[i] = h
    return out
