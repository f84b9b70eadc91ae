"""Message ids: ULIDs (26 chars, Crockford base32), unique and ordered by creation time.

Ordering by id only breaks ties between messages due in the same millisecond, so the client clock
used here never decides *when* a message is delivered (Redis TIME does that).
"""

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id() -> str:
    """A monotonic ULID: within one millisecond in one process, ids still increase."""
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            rand = int.from_bytes(os.urandom(10), "big")
        _last_ms, _last_rand = ms, rand
    return _encode(ms, 10) + _encode(rand, 16)


def new_ids(n: int) -> list[str]:
    return [new_id() for _ in range(n)]
