"""The thread worker's gate (queue_core/worker/thread.py _Gate): how many handler threads may run
at once. Its rules on a clock the test drives, and a hung handler beside a busy process.
(The drains that bring it down to one thread and open it again are in test_worker.py.)"""

import threading
from types import SimpleNamespace

import queue_core.worker.thread as thread_module
from queue_core import Worker

from .helpers import poll, running

WINDOW = 0.06   # a little over ADAPT_EVERY: sums of floats must not fall short of it


def driven_gate(monkeypatch, most: int = 8):
    """A gate whose clock and CPU time the test moves, and a step(busy, in_runs) that ends one
    window with the process at ``busy`` of a CPU and ``in_runs`` threads in runs on average."""
    clock = SimpleNamespace(now=1000.0, cpu=10.0)
    monkeypatch.setattr(thread_module, "time", SimpleNamespace(monotonic=lambda: clock.now,
                                                               process_time=lambda: clock.cpu))
    gate = thread_module._Gate(most)

    def step(busy: float, in_runs: float, work_waiting: bool = True) -> bool:
        clock.now += WINDOW
        clock.cpu += busy * WINDOW
        gate._in_runs = in_runs * WINDOW
        return gate.adapt(work_waiting)
    return gate, step


def test_finding_a_mixed_load_settles_instead_of_flipping_between_all_and_half(monkeypatch):
    """A handler with 1 ms of CPU and 7 ms of waiting: each thread in a run uses ~12 % of a CPU.
    At eight the process is CPU bound (0.96) and the gate halves; at four it has CPU to spare.
    Opening all the way again (the first rule) flipped 8 -> 4 -> 8 every window; the gate now
    opens to what the CPU allows at that rate and stays there."""
    gate, step = driven_gate(monkeypatch)
    limits = []
    for _ in range(20):
        step(busy=min(1.0, 0.12 * gate.limit), in_runs=gate.limit)
        limits.append(gate.limit)
    assert len(set(limits[-10:])) == 1, limits
    assert 4 < limits[-1] < 8, limits


def test_a_new_gate_starts_at_one_thread_and_waiting_handlers_open_it_in_one_window(monkeypatch):
    """Threads prove they are needed: judged against one core, a process sharing its cores never
    looked CPU bound, so a gate that started at ``concurrency`` stayed there for a backlog of quick
    handlers. One thread in runs with CPU for less than two stays alone; handlers that wait get
    every thread in one window."""
    gate, step = driven_gate(monkeypatch)
    assert gate.limit == 1
    step(busy=0.6, in_runs=1)              # a quick handler on a process sharing its cores
    assert gate.limit == 1
    assert step(busy=0.02, in_runs=1) is True
    assert gate.limit == 8


def test_quick_handlers_halve_the_gate_and_waiting_ones_open_it_at_once(monkeypatch):
    gate, step = driven_gate(monkeypatch)
    gate.limit = 8                         # where handlers that waited left it
    step(busy=0.5, in_runs=1.5)            # 8 allowed, ~2 in runs: the handlers keep up
    assert gate.limit == 4
    step(busy=0.95, in_runs=4)             # CPU bound
    assert gate.limit == 2
    step(busy=0.5, in_runs=0.5)
    step(busy=0.5, in_runs=0.3)
    assert gate.limit == 1
    step(busy=0.5, in_runs=0.9)            # one thread in runs, CPU for less than two: stays
    assert gate.limit == 1
    assert step(busy=0.01, in_runs=1) is True   # waiting on the network: every thread, runs shared
    assert gate.limit == 8


def test_nothing_waiting_teaches_the_gate_nothing_and_a_stopping_gate_stays_open(monkeypatch):
    gate, step = driven_gate(monkeypatch)
    gate.limit = 8
    step(busy=0.99, in_runs=0.1, work_waiting=False)
    assert gate.limit == 8
    gate.open()   # stop(): every thread must reach its stop marker
    step(busy=0.99, in_runs=0.1)
    assert gate.limit == 8


def test_finding_a_hung_handler_never_holds_the_last_place(dq):
    """With the process CPU bound (here a thread spinning beside the worker) the gate may be down
    to one place, and a handler hung on one message held it: every other message waited for
    ``max_lease``. The keeper now keeps one place more than the handlers stuck on one message."""
    started, release, spinning = threading.Event(), threading.Event(), threading.Event()
    done = []

    def handler(m):
        if m.payload == b"hang":
            started.set()
            release.wait(30)
        else:
            done.append(m.id)

    def spin():
        while not spinning.is_set():
            pass
    spinner = threading.Thread(target=spin, daemon=True)
    w = Worker(dq, {"t": handler}, concurrency=4)
    w._gate.limit = 1   # where a CPU-bound process leaves it
    spinner.start()
    try:
        with running(w):
            dq.publish("t", b"hang")
            poll(started.is_set, timeout=10)
            dq.publish_many("t", [b"quick"] * 10)
            poll(lambda: len(done) == 10, timeout=10)   # beside the hung one, not after it
            assert not release.is_set() and w._gate.limit >= 2
            release.set()
    finally:
        release.set()
        spinning.set()
        spinner.join(5)
    poll(lambda: dq.stats("t").get("acked") == 11, timeout=10)
