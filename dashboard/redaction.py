"""Redaction: what of a message a user sees when the page shows it (every GET, for everyone).

Rules come from two places. A topic's ``redaction_rules`` name keys ("password", masked at any
depth) or dotted paths ("card.number", only there); both match case-insensitively. Beside them,
site-wide key *fragments* (DELAYQ_REDACT_KEY_FRAGMENTS: "token" masks "API_TOKEN" and
"refresh_token") apply to every topic, and values that look like card numbers (13-19 digits
passing the Luhn check) are masked wherever they are.

Secrets escape through more than the payload: a handler raising ``ValueError(f"bad password
{pw}")`` puts it in the error text and the traceback. A Redactor remembers every value it masked in
the payload and the headers and masks those values wherever they appear in free text.

Payloads come from any producer; nothing in one may break a page: JSON nested deeper than
MAX_DEPTH is not walked (it is hidden, with a note) and undecodable bytes are shown replaced.
"""

import json
import re
from typing import Any

MASK = "••••••"
MAX_DEPTH = 64
MIN_SECRET_LEN = 4            # shorter masked values are not hunted in free text ("1" is everywhere)
DEFAULT_KEY_FRAGMENTS = ("password", "passwd", "secret", "token", "authorization", "api_key", "apikey",
                         "cookie", "credential", "private_key", "cvv", "ssn")
_CARD = re.compile(r"(?<!\d)(?:\d[ -]?){12,18}\d(?!\d)")
# key=value, key: value, key => value, "key": "value" in free text (log lines): key, separator,
# value (a quoted value may hold escaped quotes; an auth scheme word takes the credential after it).
_PAIR = re.compile(r"""["']?([A-Za-z_][\w.-]*)["']?(\s*(?:=>|[=:])\s*)"""
                   r"""("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|(?i:(?:bearer|basic|digest|token)\s+)?[^\s,;&]+)""")


class TooDeep(ValueError):
    pass


def validate_rules(rules: Any) -> list[str]:
    if not isinstance(rules, list):
        return ['Give a list of keys or dotted paths, e.g. ["password", "card.number"].']
    bad = [r for r in rules if not isinstance(r, str) or not r.strip() or r.startswith(".") or r.endswith(".")]
    return [f"Not a key or dotted path: {r!r}." for r in bad]


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        n = int(ch)
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def looks_like_card(value: str) -> bool:
    digits = re.sub(r"[ -]", "", value)
    return 13 <= len(digits) <= 19 and digits.isdigit() and _luhn(digits)


def key_fragments() -> tuple[str, ...]:
    from . import conf

    return tuple(f.lower() for f in conf.get("DELAYQ_REDACT_KEY_FRAGMENTS"))


class Redactor:
    """Masks one message's payload, headers and texts for a user who may not see them in full."""

    def __init__(self, rules: list[str] | None, fragments: tuple[str, ...] | None = None):
        rules = [r.strip().lower() for r in (rules or []) if isinstance(r, str) and r.strip()]
        self.explicit = bool(rules)
        self.keys = {r for r in rules if "." not in r}
        self.paths = [r.split(".") for r in rules if "." in r]
        self.fragments = key_fragments() if fragments is None else fragments
        self.secrets: set[str] = set()

    # -- structures ------------------------------------------------------------------------
    def _secret_key(self, key: str, path: list[str]) -> bool:
        k = key.lower()
        return k in self.keys or any(f in k for f in self.fragments) or any(p == path for p in self.paths)

    def _hide(self, value: Any) -> str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            self.secrets.add(str(value))
        elif isinstance(value, dict | list):
            self.secrets.update(str(v) for v in _scalars(value))
        return MASK

    def walk(self, value: Any, path: list[str] | None = None, depth: int = 0) -> Any:
        """A masked copy of ``value``; TooDeep past MAX_DEPTH levels."""
        if depth > MAX_DEPTH:
            raise TooDeep(f"nested deeper than {MAX_DEPTH} levels")
        path = path or []
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                sub = [*path, str(k).lower()]
                out[k] = self._hide(v) if self._secret_key(str(k), sub) else self.walk(v, sub, depth + 1)
            return out
        if isinstance(value, list):
            return [self.walk(v, path, depth + 1) for v in value]
        if isinstance(value, int) and not isinstance(value, bool) and looks_like_card(str(value)):
            return self._hide(value)
        if isinstance(value, str):
            return self._cards(value)
        return value

    def _cards(self, value: str) -> str:
        """``value`` with every card-number-shaped run masked (and remembered)."""
        def sub(match):
            if not looks_like_card(match.group(0)):
                return match.group(0)
            self.secrets.add(match.group(0))
            return MASK
        return _CARD.sub(sub, value) if any(c.isdigit() for c in value) else value

    def payload(self, raw: bytes) -> tuple[str, Any, bool]:
        """(text to show, the masked JSON value or None when not JSON, was anything hidden)."""
        try:
            data = json.loads(raw)
        except RecursionError:
            return self._too_deep(raw), None, True
        except (ValueError, UnicodeDecodeError):
            if self.explicit:   # we cannot tell what in free-form bytes is secret
                return f"[{len(raw):,} bytes, not JSON: hidden by this topic's redaction rules]", None, True
            return self.text(raw.decode("utf-8", "replace")), None, False
        try:
            masked = self.walk(data)
        except TooDeep:
            return self._too_deep(raw), None, True
        return json.dumps(masked, indent=2, ensure_ascii=False, sort_keys=True), masked, masked != data

    @staticmethod
    def _too_deep(raw: bytes) -> str:
        return (f"[{len(raw):,} bytes of JSON nested deeper than {MAX_DEPTH} levels: not displayed; "
                "a user with the view_payload permission can download it]")

    def headers(self, headers: dict | None) -> dict:
        if not headers:
            return {}
        try:
            return self.walk(headers)
        except TooDeep:
            return {"[headers]": MASK}

    # -- free text ---------------------------------------------------------------------------
    def log_text(self, value: str | None) -> str:
        """A handler's log line or progress note: ``key=value`` and ``key: value`` pairs whose key
        the rules name are masked (their values are hunted elsewhere too), then as ``text``."""
        return self.log_texts([value])[0]

    def log_texts(self, values: list[str | None]) -> list[str]:
        """As log_text for several texts (a journal's note and lines): the secrets of every pair
        in any of them are gathered first, so a secret named in a later line is masked in the
        earlier ones too."""
        def secret_pair(match) -> bool:
            return bool(self._secret_key(match.group(1), [match.group(1).lower()]))
        for value in values:
            for match in _PAIR.finditer(value or ""):
                if secret_pair(match):
                    secret = match.group(3).strip("'\"")
                    self.secrets.add(secret)
                    if " " in secret:               # "Bearer tok-abc": the credential alone too
                        self.secrets.add(secret.split()[-1])

        def pair(match):
            return match.group(1) + match.group(2) + MASK if secret_pair(match) else match.group(0)
        return [self.text(_PAIR.sub(pair, value)) if value else (value or "") for value in values]

    def text(self, value: str | None) -> str:
        """``value`` with every secret seen so far, and anything shaped like a card number, masked."""
        if not value:
            return value or ""
        for secret in sorted((s for s in self.secrets if len(s) >= MIN_SECRET_LEN), key=len, reverse=True):
            value = value.replace(secret, MASK)
        return _CARD.sub(lambda m: MASK if looks_like_card(m.group(0)) else m.group(0), value)


def _scalars(value: Any, depth: int = 0):
    if depth > MAX_DEPTH:
        return
    if isinstance(value, dict):
        for v in value.values():
            yield from _scalars(v, depth + 1)
    elif isinstance(value, list):
        for v in value:
            yield from _scalars(v, depth + 1)
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        yield value


def redact(data: Any, rules: list[str]) -> Any:
    """A masked copy of a parsed JSON value (topic rules and the site-wide fragments)."""
    return Redactor(rules).walk(data)


def redact_payload(payload: bytes, rules: list[str]) -> tuple[str, bool]:
    """(text to show, was anything hidden)."""
    text, _, hidden = Redactor(rules).payload(payload)
    return text, hidden
