"""Error fingerprints: dead letters that failed "the same way" share one, so operators can act
on a whole group ("all that failed with X"). The message is normalised so ids, numbers, quoted
values and addresses that differ per message do not split a group."""

import hashlib
import re

_RULES = [
    (re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"), "<uuid>"),
    (re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b"), "<ulid>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\b[0-9a-fA-F]{16,}\b"), "<hex>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
]


def normalise(message: str) -> str:
    out = message
    for pattern, repl in _RULES:
        out = pattern.sub(repl, out)
    return out.strip()[:300]


def fingerprint(error_type: str, message: str) -> str:
    """12 hex chars from the error type and its normalised message."""
    basis = f"{error_type}|{normalise(message)}"
    return hashlib.sha1(basis.encode("utf-8", "replace")).hexdigest()[:12]


LEASE_EXPIRED_FP = fingerprint("LeaseExpired", "lease expired before ack")
CORRUPT_FP = fingerprint("CorruptMessage", "corrupt message")
EXPIRED_FP = fingerprint("Expired", "time to live ran out")
# A chained message whose parent left its group without an ack (lua/includes/chain.lua).
PARENT_GONE_FP = fingerprint("ParentGone", "parent left the group without an ack")
CANCELLED_FP = fingerprint("Cancelled", "cancelled while running")   # one error group for every operator's cancels
