"""Payload redaction: keys or dotted paths whose values are masked when a payload is shown to a
user without ``view_payload``."""

import json
from typing import Any

MASK = "••••••"


def validate_rules(rules: Any) -> list[str]:
    if not isinstance(rules, list):
        return ['Give a list of keys or dotted paths, e.g. ["password", "card.number"].']
    bad = [r for r in rules if not isinstance(r, str) or not r.strip() or r.startswith(".") or r.endswith(".")]
    return [f"Not a key or dotted path: {r!r}." for r in bad]


def _mask(value: Any, path: list[str]) -> Any:
    if isinstance(value, list):
        return [_mask(v, path) for v in value]
    if not isinstance(value, dict):
        return value
    head, rest = path[0], path[1:]
    out = {}
    for k, v in value.items():
        if k == head:
            out[k] = MASK if not rest else _mask(v, rest)
        else:
            out[k] = v
    return out


def _mask_key_anywhere(value: Any, key: str) -> Any:
    if isinstance(value, list):
        return [_mask_key_anywhere(v, key) for v in value]
    if isinstance(value, dict):
        return {k: MASK if k == key else _mask_key_anywhere(v, key) for k, v in value.items()}
    return value


def redact(data: Any, rules: list[str]) -> Any:
    """A copy of ``data`` with every rule applied. A plain key ("password") is masked at any depth;
    a dotted path ("card.number") only there (lists are walked through)."""
    for rule in rules:
        parts = rule.split(".")
        data = _mask_key_anywhere(data, rule) if len(parts) == 1 else _mask(data, parts)
    return data


def redact_payload(payload: bytes, rules: list[str]) -> tuple[str, bool]:
    """(text to show, was anything hidden). Non-JSON payloads are hidden whole when rules exist:
    we cannot tell what in them is secret."""
    try:
        data = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        if rules:
            return f"[{len(payload):,} bytes, not JSON: hidden by this topic's redaction rules]", True
        return payload.decode("utf-8", "replace"), False
    redacted = redact(data, rules)
    return json.dumps(redacted, indent=2, ensure_ascii=False, sort_keys=True), redacted != data
