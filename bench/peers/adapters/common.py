"""Shared by every adapter (each runs as a script in its own interpreter, this folder on sys.path).

The publisher puts the due time (wall clock ms, this machine) in each message; the handler
appends "due_ms handled_ms" to a file of its own process, so lateness is measured the same way
for every queue, outside Redis and without any extra Redis command.
"""

import os
import random
import threading
import time

_lock = threading.Lock()
_files: dict[int, object] = {}


def record(due_ms: float) -> None:
    now = time.time() * 1000
    with _lock:
        fh = _files.get(os.getpid())
        if fh is None:   # one file per process (rq forks), open for the process's life
            path = os.path.join(os.environ["BENCH_OUT_DIR"], f"{os.getpid()}.txt")
            fh = _files[os.getpid()] = open(path, "a", buffering=1)  # noqa: SIM115
        fh.write(f"{due_ms:.3f} {now:.3f}\n")


def delays(n: int, spread: float, seed: int = 1) -> list[float]:
    """n delays in seconds, uniform over [0, spread]."""
    rng = random.Random(seed)
    return [rng.random() * spread for _ in range(n)]


def paced(n: int, rate: float, spread: float, publish_one) -> None:
    """Publish n messages at ``rate`` per second, each with a delay in [0, spread]."""
    start = time.monotonic()
    for i, d in enumerate(delays(n, spread, seed=2)):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        publish_one(time.time() * 1000 + d * 1000, d)


def due_ms(delay: float) -> float:
    """The due time of a message published now with ``delay``: computed by each adapter just
    before the call that publishes it, so publishing time never counts as lateness."""
    return time.time() * 1000 + delay * 1000


def main(publish_bulk, publish_one, worker, argv) -> None:
    """adapter.py publish URL N SPREAD | light URL N RATE SPREAD | worker URL CONCURRENCY"""
    cmd, url = argv[1], argv[2]
    if cmd == "publish":
        publish_bulk(url, delays(int(argv[3]), float(argv[4])))
    elif cmd == "light":
        publish_one_to = publish_one(url)
        paced(int(argv[3]), float(argv[4]), float(argv[5]), publish_one_to)
    elif cmd == "worker":
        worker(url, int(argv[3]))
    else:
        raise SystemExit(f"unknown command {cmd}")
