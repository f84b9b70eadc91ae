"""Dispatch control benchmark: python -m bench.dispatch [--quick] [--write] [--only fairness,rate,cost]

Starts its own Redis (as bench.engine does) and measures, with default worker processes
(`delayq worker`, no tuning) and the real handler (JSON decode + one appended line):

- fairness: key A's 100,000 due messages drain; key B publishes 100 while A drains. B's
  lateness p50/p99 and the drain rate, beside the same drain with no fairness keys (three
  alternating rounds, the same handler in both).
- rate: a group limited to 100/s, 2 worker processes x 8 handlers, a 20,000-message backlog, for
  60 s: messages handled per second (mean, min, max); then a limit of 1 per 10 s for 35 s.
- cost: Redis and worker CPU per message of a drain with no limits (the hot path), with limits
  set that never bind (what the bookkeeping costs), and with 100 fairness keys and priorities.
--write records the tables in bench/RESULTS.md ("Dispatch control (issue 33)").
"""

import argparse
import statistics
import sys
import threading
import time

from bench.engine import Bench, commandstats, machine, percentiles, redis_cpu, write_section
from bench.procstat import tree_usage

TOPIC = "dispatch"


def _payloads(start: int, n: int) -> list[dict]:
    return [{"n": i, "customer": f"c{i % 97}", "note": "x" * 60} for i in range(start, start + n)]


class DispatchBench(Bench):

    def _publish(self, n: int, **kwargs) -> None:
        for start in range(0, n, 1000):
            self.q.publish_many(TOPIC, _payloads(start, min(1000, n - start)), **kwargs)

    def _drain(self, n: int, workers: int, label: str, handler: str = "bench.handlers:real",
               during=None) -> dict:
        """Run ``workers`` default worker processes until ``n`` messages are acked; ``during``
        (if given) runs once the drain is under way. Returns rate and CPU per message."""
        self.r.config_resetstat()
        procs = [self.worker(TOPIC, handler, "--concurrency", "8") for _ in range(workers)]
        try:
            self.wait_for(lambda: self.q.stats(TOPIC).get("acked", 0) > 0, 60, "first ack")
            t0, a0 = time.perf_counter(), self.q.stats(TOPIC)["acked"]
            cpu_r0, cpu_w0 = redis_cpu(self.r), sum(tree_usage(p.pid)[0] for p in procs)
            # `during` runs on a thread of its own: the drain's clock must not include its waiting.
            side = threading.Thread(target=during, daemon=True) if during else None
            if side:
                side.start()
            self.wait_for(lambda: self.q.stats(TOPIC).get("acked", 0) >= n, 600, f"drain ({label})")
            elapsed = time.perf_counter() - t0
            if side:
                side.join(10)
            cpu_r1, cpu_w1 = redis_cpu(self.r), sum(tree_usage(p.pid)[0] for p in procs)
        finally:
            for p in procs:
                self.stop(p)
        done = n - a0
        stats = commandstats(self.r)
        return {"rate": done / elapsed, "redis_us": (cpu_r1 - cpu_r0) / done * 1e6,
                "worker_us": (cpu_w1 - cpu_w0) / done * 1e6,
                "calls": (stats.get("evalsha", 0) + stats.get("blpop", 0)) / n}

    def fairness(self):
        """Plain and keyed drains alternate (this machine's speed swings by tens of percent within
        minutes: one pair of runs says little), each with the same handler, fair_probe (the real
        handler, plus key B's lateness): the median of the rounds' ratios is the figure."""
        n_a, n_b = (20_000, 100) if self.quick else (100_000, 100)
        rounds = 1 if self.quick else 3
        ratios, late_b, rows = [], [], []
        for _ in range(rounds):
            self.r.flushdb()
            self._publish(n_a + n_b)
            plain = self._drain(n_a + n_b, 2, "no keys", handler="bench.handlers:fair_probe")
            self.r.flushdb()
            self._publish(n_a, fairness_key="A")

            def publish_b():
                # While A drains: once a fifth of A is acked (polled, with a deadline).
                self.wait_for(lambda: self.q.stats(TOPIC).get("acked", 0) >= n_a // 5, 120, "A draining")
                self.q.publish_many(TOPIC, [{"n": -i, "customer": "B", "note": "b"} for i in range(n_b)],
                                    fairness_key="B")
            self.r.delete("bench:lateness:B")
            fair = self._drain(n_a + n_b, 2, "keys A and B", handler="bench.handlers:fair_probe", during=publish_b)
            lates = [float(x) for x in self.r.lrange("bench:lateness:B", 0, -1)]
            if len(lates) != n_b:
                raise RuntimeError(f"expected {n_b} lateness samples of key B, got {len(lates)}")
            late_b += lates
            ratios.append(fair["rate"] / plain["rate"])
            rows.append((plain, fair))
        for i, (plain, fair) in enumerate(rows, 1):
            self.row(f"round {i}: drain {n_a + n_b:,} due, no fairness keys / {n_a:,} of key A + {n_b} of key B, "
                     "2 default workers", f"{plain['rate']:,.0f} / {fair['rate']:,.0f} msg/s",
                     f"{ratios[i - 1]:.0%}; Redis {plain['redis_us']:.1f} / {fair['redis_us']:.1f} us/msg, "
                     f"worker {plain['worker_us']:.1f} / {fair['worker_us']:.1f} us/msg")
        self.row("keyed drain against the drain without keys", f"{statistics.median(ratios):.0%}",
                 f"median of {rounds} alternating round{'s' if rounds > 1 else ''} (target >= 90 %)")
        p = percentiles(late_b)
        self.row(f"key B's {n_b} messages: lateness while A drains", f"p99 {p['p99']:.0f} ms",
                 f"p50 {p['p50']:.0f} ms, max {max(late_b):.0f} ms over {rounds} round{'s' if rounds > 1 else ''} "
                 "(target p99 <= 250 ms)")

    def _handled_times(self, rate: tuple[int, float], backlog: int, seconds: float) -> list[float]:
        """Two default worker processes x 8 handlers on a group limited to ``rate`` with a
        ``backlog``, for ``seconds`` after the first message: the times (ms) messages were handled."""
        self.r.flushdb()
        self.q.configure_topic(TOPIC)
        self.q.configure_group(TOPIC, "default", rate=rate)
        self._publish(backlog)
        procs = [self.worker(TOPIC, "bench.handlers:record_handled", "--concurrency", "8") for _ in range(2)]
        try:
            self.wait_for(lambda: self.r.llen("bench:handled") > 0, 60, "first handled")
            time.sleep(seconds)
        finally:
            for p in procs:
                self.stop(p)
        return sorted(float(x) for x in self.r.lrange("bench:handled", 0, -1))

    def rate(self):
        seconds = 15 if self.quick else 60
        times = self._handled_times((100, 1.0), 20_000, seconds + 2)
        start = times[0]
        per_second = [sum(1 for t in times if start + i * 1000 <= t < start + (i + 1) * 1000)
                      for i in range(1, seconds + 1)]    # the first second holds the starting burst
        mean = statistics.mean(per_second)
        self.row(f"rate=(100, 1.0): handled per second over {seconds} s, 2 workers x 8", f"{mean:.1f} /s",
                 f"min {min(per_second)}, max {max(per_second)} per second; target 100 +- 2 %")
        times = self._handled_times((1, 10.0), 50, 21 if self.quick else 35)
        gaps = [round((b - a) / 1000, 2) for a, b in zip(times, times[1:], strict=False)]
        self.row("rate=(1, 10.0): gaps between messages", f"{len(times)} handled",
                 f"gaps {', '.join(f'{g:g} s' for g in gaps)}")

    def cost(self):
        n = 20_000 if self.quick else 100_000
        rows = {}
        for label, config, publish in (
                ("no limits, no keys, no priority", {}, {}),
                ("limits set that never bind", {"rate": (1_000_000, 1.0), "max_in_flight": 100_000}, {}),
                ("100 fairness keys, priorities 0-9, no limits", {}, "keys"),
                ("limits + 100 fairness keys + key limits, priorities 0-9", {
                    "rate": (1_000_000, 1.0), "max_in_flight": 100_000, "key_rate": (1_000_000, 1.0),
                    "max_in_flight_per_key": 10_000}, "keys")):
            self.r.flushdb()
            self.q.configure_topic(TOPIC)
            self.q.configure_group(TOPIC, "default", **config)
            if publish == "keys":
                for start in range(0, n, 1000):
                    self.q.publish_many(TOPIC, _payloads(start, 1000), fairness_key=f"tenant-{start // 1000 % 100}",
                                        priority=start // 1000 % 10)
            else:
                self._publish(n)
            rows[label] = self._drain(n, 2, label)
            r = rows[label]
            self.row(f"drain {n:,}, {label}", f"{r['rate']:,.0f} msg/s",
                     f"Redis {r['redis_us']:.1f} us/msg, worker {r['worker_us']:.1f} us/msg, "
                     f"{r['calls']:.3f} script calls/msg")
        base = rows["no limits, no keys, no priority"]["redis_us"]
        for label, r in rows.items():
            if r["redis_us"] != base:
                self.row(f"  Redis CPU, {label}", f"{r['redis_us'] / base - 1:+.0%}", "vs no limits, no keys, no priority")
        keyed = rows["100 fairness keys, priorities 0-9, no limits"]["redis_us"]
        limited = rows["limits + 100 fairness keys + key limits, priorities 0-9"]["redis_us"]
        self.row("  Redis CPU of the limits on keyed traffic", f"{limited / keyed - 1:+.0%}",
                 "limits + key limits vs the same keys and priorities without (target <= +15 %)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--only", default="fairness,rate,cost")
    args = parser.parse_args()
    b = DispatchBench(args.quick)
    try:
        for step in args.only.split(","):
            print(f"== {step}", flush=True)
            getattr(b, step.strip())()
    finally:
        b.close()
    if args.write:
        write_section("dispatch", "Dispatch control (issue 33)",
                      f"`python -m bench.dispatch{' --quick' if args.quick else ''}` on {machine()}; server "
                      f"{b.server.kind if hasattr(b.server, 'kind') else 'redis-server'}. Default worker processes "
                      "(no --prefetch/--batch), the real handler unless noted.", b.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
