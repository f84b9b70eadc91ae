"""Handlers for benchmark worker processes."""

import atexit
import os
import threading
import time

import redis

_lock = threading.Lock()
_samples: dict[str, list[str]] = {}
_flusher: threading.Thread | None = None


def noop(message) -> None:
    """The cheapest possible handler: measures the queue, not the work."""


def noop_batch(messages) -> None:
    """The batch form of noop: one call for up to N messages."""


_log_fd: int | None = None


def real(message) -> None:
    """What a user's handler does at the least: decode the JSON payload and do a little I/O (one
    line appended to a file, one write(2) on an O_APPEND descriptor: atomic between threads)."""
    global _log_fd
    order = message.json()
    if _log_fd is None:
        path = os.environ.get("BENCH_HANDLER_LOG") or os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                                   f"delayq-bench-{os.getpid()}.log")
        with _lock:
            if _log_fd is None:
                _log_fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.write(_log_fd, f"{message.id} {order['n']} {order['customer']}\n".encode())


def _flush_forever(client: redis.Redis) -> None:
    while True:
        time.sleep(0.05)
        _flush(client)


def _flush(client: redis.Redis) -> None:
    with _lock:
        batches = dict(_samples)
        _samples.clear()
    for key, batch in batches.items():
        if batch:
            client.rpush(key, *batch)


def _record(key: str, value: str) -> None:
    """Keep a sample for the Redis list ``key``; shipped in the background, so recording costs
    the measured path no round trip."""
    global _flusher
    with _lock:
        _samples.setdefault(key, []).append(value)
        if _flusher is None:
            client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
            _flusher = threading.Thread(target=_flush_forever, args=(client,), daemon=True)
            _flusher.start()
            atexit.register(_flush, client)


def record_lateness(message) -> None:
    """Handler start minus due time, in ms (same machine, so the same clock as Redis), in the list
    bench:lateness."""
    _record("bench:lateness", f"{time.time() * 1000 - message.due_at.timestamp() * 1000:.3f}")


def fair_probe(message) -> None:
    """The real handler; for a payload whose customer is "B" (the fairness benchmark's second
    key) its lateness in the list bench:lateness:B."""
    if b'"customer": "B"' in message.payload or b'"customer":"B"' in message.payload:
        _record("bench:lateness:B", f"{time.time() * 1000 - message.due_at.timestamp() * 1000:.3f}")
    real(message)


def record_handled(message) -> None:
    """The real handler, and the time it ran (ms) in the list bench:handled."""
    real(message)
    _record("bench:handled", f"{time.time() * 1000:.3f}")


async def async_noop(message) -> None:
    """noop as an async def handler: the CLI runs it in an AsyncWorker."""


async def async_record_lateness(message) -> None:
    """record_lateness as an async def handler (recording is the same non-blocking append)."""
    record_lateness(message)


async def async_real(message) -> None:
    """real as an async def handler: the same JSON decode and write(2)."""
    real(message)
