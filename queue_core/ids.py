"""Message ids: ULIDs (26 chars, Crockford base32), unique and ordered by creation time.

Ordering by id only breaks ties between messages due in the same millisecond, so the client clock
used here never decides *when* a message is delivered (Redis TIME does that).
"""

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"   # Crockford's base32
ID_CHARS = 26                                        # an id's length (a partition's adds ".<n>")
# Two base32 digits for every 10-bit value: a 130-bit id is 13 lookups.
_PAIRS = [_ALPHABET[i >> 5] + _ALPHABET[i & 31] for i in range(1024)]
_LOW_BITS = 30                                       # the last 6 digits
_LOW_MASK = (1 << _LOW_BITS) - 1
_RAND_MASK = (1 << 80) - 1
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def _encode_digits(value: int, pairs: int) -> str:
    out = []
    for _ in range(pairs):
        out.append(_PAIRS[value & 1023])
        value >>= 10
    return "".join(reversed(out))


def _encode(value: int) -> str:
    """26 Crockford base32 digits of a 128-bit value (130 bits, the top two zero)."""
    return _encode_digits(value, 13)


def new_ids(n: int) -> list[str]:
    """n monotonic ULIDs: within one millisecond in one process, ids still increase."""
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms, rand = _last_ms, _last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # headroom so a batch cannot overflow
        _last_ms, _last_rand = ms, (rand + n - 1) & _RAND_MASK
    base = (ms << 80) | rand
    # Consecutive ids share their first 20 digits until the low 30 bits carry: encode those once
    # (base64.b32encode is pure Python on 3.13 and cost ~10 us an id; this is ~1 us).
    out = []
    high_value, high = -1, ""
    for value in range(base, base + n):
        if value >> _LOW_BITS != high_value:
            high_value = value >> _LOW_BITS
            high = _encode_digits(high_value, 10)
        out.append(high + _encode_digits(value & _LOW_MASK, 3))
    return out


def new_id() -> str:
    return new_ids(1)[0]
