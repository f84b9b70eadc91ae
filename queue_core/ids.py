"""Message ids: ULIDs (26 chars, Crockford base32), unique and ordered by creation time.

Ordering by id only breaks ties between messages due in the same millisecond, so the client clock
used here never decides *when* a message is delivered (Redis TIME does that).
"""

import base64
import os
import threading
import time

_CROCKFORD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789ABCDEFGHJKMNPQRSTVWXYZ")
_RAND_MASK = (1 << 80) - 1
_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def _encode(value: int) -> str:
    # 26 base32 digits hold 130 bits (two leading zeros + 128): place them at the top of 160 bits, let the C
    # base32 encoder do the work, keep the first 26 digits and map RFC 4648's alphabet to Crockford's.
    return base64.b32encode((value << 30).to_bytes(20, "big"))[:26].decode().translate(_CROCKFORD)


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
    return [_encode(base + i) for i in range(n)]


def new_id() -> str:
    return new_ids(1)[0]
