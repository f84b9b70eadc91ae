"""The message query language, parsed once and evaluated on both sides of the wire.

A query is terms separated by spaces; a message matches when every term does::

    payload.customer.id:42      the value at a JSON path of the payload (objects by key, arrays by
                                0-based index; a list at the end matches when any element does)
    payload.note:"late fee"     a quoted value may hold spaces; \\" and \\\\ inside quotes
    header.tenant:acme          the same on the message's headers
    error:TimeoutError          the last error's "Type: message" contains it (any case)
    key:order-*                 the dedup key; ``*`` matches any run of characters, anywhere
    order_key:customer-7        the ordering key
    id:01JD4*                   the message id
    fingerprint:3f2a9c0d        the last error's fingerprint (the dead-letter error group)
    attempts>=3                 deliveries so far; also >, <, <=, : (equal)
    fairness_key:acme           the fairness key (dispatch control)
    priority>=5                 the priority, 0-9 (0 when none was given); compares as attempts does

``field:value`` is equality (with ``*`` as the wildcard); numbers compare as numbers when both
sides are numbers (``payload.total:42`` matches 42 and 42.0). A query of one word with no field
(``01JD4...``, ``order-1234`` or ``schedule:daily:42``, whose first part is no field) is not a
predicate: it names one message by id or dedup key, as
the box always did.

The engine's scan (lua/search.lua) evaluates the same terms inside Redis; ``Query.matches`` is the
Python evaluation, which the dashboard runs on what a user may see (after redaction), so a query
can never find a message by a value the user is not shown.
"""

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from .errors import InvalidArgument

MAX_QUERY_CHARS = 500
MAX_TERMS = 8
MAX_VALUE_CHARS = 200
MAX_PATH_SEGMENTS = 16
MAX_STARS = 4

PATH_FIELDS = ("payload", "header")
TEXT_FIELDS = ("error", "key", "order_key", "id", "fingerprint", "fairness_key")
NUMBER_FIELDS = ("attempts", "priority")
FIELDS = (*PATH_FIELDS, *TEXT_FIELDS, *NUMBER_FIELDS)
COMPARISONS = (">=", "<=", ">", "<")
EXAMPLE = 'payload.customer.id:42 header.tenant:acme error:TimeoutError key:order-* attempts>=3'

_SEGMENT = r"[A-Za-z0-9_$@-]+"
_TERM = re.compile(
    rf"(?P<field>[A-Za-z_]+)(?P<path>(?:\.{_SEGMENT})*)(?P<op>>=|<=|:|>|<)"
    r'(?P<value>"(?:[^"\\]|\\.)*"|[^\s"]+)(?=\s|$)')
_QUOTED_OPEN = re.compile(r'[A-Za-z_][^\s:<>]*(?:>=|<=|:|>|<)"')
_NUMBER = re.compile(r"^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?$")


class QueryError(InvalidArgument):
    """A query that does not parse: the message says where and what was expected."""


@dataclass(frozen=True, slots=True)
class Term:
    field: str                 # one of FIELDS
    path: tuple[str, ...]      # payload and header only
    op: str                    # ':' or a comparison (attempts only)
    value: str

    def text(self) -> str:
        value = self.value
        if not value or any(c.isspace() or c == '"' for c in value):
            value = '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return ".".join((self.field, *self.path)) + self.op + value


@dataclass(frozen=True, slots=True)
class Query:
    terms: tuple[Term, ...] = ()
    lookup: str = ""           # a single bare word: an id or a dedup key, not a predicate

    def __bool__(self) -> bool:
        return bool(self.terms or self.lookup)

    def text(self) -> str:
        return self.lookup or " ".join(t.text() for t in self.terms)

    def paths(self, field: str) -> list[tuple[str, ...]]:
        """The JSON paths the query reads in ``field`` ("payload" or "header")."""
        return [t.path for t in self.terms if t.field == field]

    def script_args(self) -> list[str]:
        """The terms as lua/search.lua reads them: field, dotted path, op, value, and the value
        when it compares as a number (a path's plain number) else ''."""
        out: list[str] = []
        for t in self.terms:
            number = t.value if t.field in PATH_FIELDS and "*" not in t.value and _NUMBER.match(t.value) else ""
            out += [t.field, ".".join(t.path), t.op, t.value, number]
        return out

    def matches(self, fields: dict[str, Any]) -> bool:
        """Whether a message matches, given what is known of it: ``payload`` (parsed JSON, or None
        when it is not JSON), ``headers`` (dict), ``error`` ("Type: message" or ""), ``key``,
        ``order_key``, ``id``, ``fingerprint`` (str or None) and ``attempts`` (int)."""
        return all(_term_matches(t, fields) for t in self.terms)


def parse(text: str | None) -> Query:
    """The query in ``text`` (empty: no query). QueryError says what is wrong and where."""
    text = (text or "").strip()
    if not text:
        return Query()
    if len(text) > MAX_QUERY_CHARS:
        raise QueryError(f"the query is {len(text)} characters long; at most {MAX_QUERY_CHARS}")
    name = re.match(r"[^:<>]*", text).group(0)
    if not any(c.isspace() or c == '"' for c in text) and "." not in name and name.lower() not in FIELDS:
        return Query(lookup=text)   # one word that names no field: an id or a key ("schedule:daily:42")
    terms, pos = [], 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        m = _TERM.match(text, pos)
        if m is None:
            word = re.match(r"\S+", text[pos:]).group(0)
            if pos == 0 and len(text) == len(word) and not any(op in word for op in ":<>\""):
                return Query(lookup=word)
            raise QueryError(_explain(text, pos, word))
        terms.append(_term(m, pos))
        pos = m.end()
    if len(terms) > MAX_TERMS:
        raise QueryError(f"{len(terms)} terms; a query takes at most {MAX_TERMS}")
    return Query(tuple(terms))


def _explain(text: str, pos: int, word: str) -> str:
    where = f"at column {pos + 1} ({word[:40]!r})"
    if _QUOTED_OPEN.match(text, pos):
        return f"unclosed quote {where}: end the value with \""
    if not any(op in word for op in ":<>"):
        return (f"{word[:40]!r} has no field {where}: write field:value (e.g. {EXAMPLE.split()[0]}); a single "
                "word alone finds one message by id or dedup key")
    field = re.match(r"[^.:<>]*", word).group(0)
    if field and field.lower() not in FIELDS:
        return f"unknown field {field[:40]!r} {where}; the fields are {', '.join(FIELDS)}"
    return (f"malformed term {where}: write field:value, a quoted \"value with spaces\", or attempts>=N "
            f"(e.g. {EXAMPLE})")


def _term(m: re.Match, pos: int) -> Term:
    field = m["field"].lower()
    where = f"at column {pos + 1}"
    if field == "headers":
        field = "header"
    if field not in FIELDS:
        raise QueryError(f"unknown field {m['field'][:40]!r} {where}; the fields are {', '.join(FIELDS)}")
    path = tuple(m["path"].split(".")[1:])
    if field in PATH_FIELDS and not path:
        raise QueryError(f"{field} needs a path {where}: {field}.<name>[.<name>...], e.g. {field}.customer.id:42")
    if field not in PATH_FIELDS and path:
        raise QueryError(f"{field} takes no path {where} (only payload.<path> and header.<path> do)")
    if len(path) > MAX_PATH_SEGMENTS:
        raise QueryError(f"the path {where} has {len(path)} parts; at most {MAX_PATH_SEGMENTS}")
    value = m["value"]
    if value.startswith('"'):
        value = re.sub(r"\\(.)", r"\1", value[1:-1])
    if len(value) > MAX_VALUE_CHARS:
        raise QueryError(f"the value {where} is {len(value)} characters; at most {MAX_VALUE_CHARS}")
    if value.count("*") > MAX_STARS:
        raise QueryError(f"the value {where} has {value.count('*')} wildcards; at most {MAX_STARS}")
    op = m["op"]
    if field in NUMBER_FIELDS:
        if not value.isdigit() or len(value) > 9:
            raise QueryError(f"{field} compares with a whole number {where} (e.g. {field}>=3), not {value[:40]!r}")
    elif op != ":":
        raise QueryError(f"{field} takes ':' {where}; only {', '.join(NUMBER_FIELDS)} compare with {', '.join(COMPARISONS)}")
    return Term(field, path, op, value)


# -- evaluation (the same rules as lua/search.lua) ------------------------------------------------

def glob_match(pattern: str, text: str) -> bool:
    """``*`` matches any run of characters; everything else matches itself. Linear: the first
    piece must start the text, the last end it, the others appear in order (leftmost each)."""
    if "*" not in pattern:
        return pattern == text
    pieces = pattern.split("*")
    first, last = pieces[0], pieces[-1]
    if not text.startswith(first) or len(text) < len(first) + len(last):
        return False
    pos, end = len(first), len(text) - len(last)
    for piece in pieces[1:-1]:
        found = text.find(piece, pos, end)
        if found < 0:
            return False
        pos = found + len(piece)
    return text.endswith(last)


def scalar_text(value: Any) -> str | None:
    """A JSON scalar as the query compares it (None for objects and lists)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, int | float | str):
        return str(value)
    return None


def _value_matches(want: str, value: Any) -> bool:
    if isinstance(value, list):
        return any(_value_matches(want, v) for v in value if not isinstance(v, list))
    if isinstance(value, int | float) and not isinstance(value, bool) and "*" not in want and _NUMBER.match(want):
        return float(want) == value
    text = scalar_text(value)
    return text is not None and glob_match(want, text)


def at_path(value: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    """(found, the value at ``path``): objects by key, lists by 0-based index."""
    for seg in path:
        if isinstance(value, dict) and seg in value:
            value = value[seg]
        elif isinstance(value, list) and seg.isdigit() and int(seg) < len(value):
            value = value[int(seg)]
        else:
            return False, None
    return True, value


def _term_matches(t: Term, fields: dict[str, Any]) -> bool:
    if t.field in PATH_FIELDS:
        found, value = at_path(fields.get("payload" if t.field == "payload" else "headers"), t.path)
        return found and not isinstance(value, dict) and _value_matches(t.value, value)
    if t.field in NUMBER_FIELDS:
        n, want = int(fields.get(t.field) or 0), int(t.value)
        return {":": n == want, ">=": n >= want, "<=": n <= want, ">": n > want, "<": n < want}[t.op]
    if t.field == "error":
        return glob_match(f"*{t.value.lower()}*", (fields.get("error") or "").lower())
    text = fields.get(t.field)
    return text is not None and text != "" and glob_match(t.value, str(text))


def message_fields(message, payload: Any = "raw", headers: dict | None = None, error: str | None = None) -> dict:
    """The fields of an engine Message that a query reads; ``payload``/``headers``/``error`` replace
    the message's own (the dashboard passes the redacted ones)."""
    if payload == "raw":
        try:
            payload = json.loads(message.payload) if not message.corrupt else None
        except (ValueError, UnicodeDecodeError, RecursionError):
            payload = None
    err = message.last_error
    return {"payload": payload, "headers": message.headers if headers is None else headers,
            "error": (err.summary() if err else "") if error is None else error, "key": message.key,
            "order_key": message.order_key, "id": message.id, "fingerprint": err.fingerprint if err else None,
            "attempts": message.attempts, "fairness_key": message.fairness_key, "priority": message.priority}
