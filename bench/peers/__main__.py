"""Side by side with the peers: python -m bench.peers [--quick] [--only NAME ...] [--write]

The same three scenarios for delayq and for BullMQ (Python port), arq, rq (with its scheduler)
and Celery (countdown), one after another on one fresh Redis (flushed between runs), each peer
installed from PyPI into its own virtualenv (var/peers-venv, never the project's). Beside them
"lean", the limit reference: the least a Redis delay queue can do (adapters/lean_adapter.py).
``--workers 2`` runs two worker processes per system:

1. drain: N delayed messages due within 5 s are published, then, once all are due, the worker
   starts: messages per second from the first handled to the last (and how long after its start
   the worker handled the first: interpreter start-up, connecting, polling intervals).
2. live: the worker runs while N messages with delays spread over 5 s are published: messages
   per second from the first publish to the last handled, and lateness.
3. light: 200 messages per second, paced, each due within 1 s: lateness, the precision of the
   scheduling mechanism itself.

Every system runs one worker process with concurrency 8 (rq cannot run jobs concurrently in one
process: it gets a pool of 8 worker processes). Lateness is handled time minus due time, both
from this machine's clock, recorded by the handler to a file (no Redis command). Also: worker
CPU ms per message (the worker's process tree), Redis commands per message (INFO commandstats,
commands run inside Lua scripts included), the worker's peak RSS and Redis's peak used_memory.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

from queue_core.contrib import localserver

from ..engine import machine, replace_section
from ..procstat import tree_usage

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = Path(__file__).with_name("adapters")
VENV = ROOT / "var" / "peers-venv"
PEERS = {"bullmq": "bullmq", "arq": "arq", "rq": "rq", "celery": "celery"}
EXTRA = ("packaging",)   # kombu's Redis transport imports it without declaring it
SYSTEMS = ("delayq", "lean", "bullmq", "arq", "rq", "celery")   # lean: the limit reference (lean_adapter.py)
CONCURRENCY = 8
TIMEOUT = 240.0
WORKERS = 1     # worker processes per system (--workers)


def peers_python() -> str:
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"creating {VENV} and installing {', '.join(PEERS.values())} from PyPI ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
        subprocess.run([str(python), "-m", "ensurepip"], check=True, stdout=subprocess.DEVNULL)
    if subprocess.run([str(python), "-c", "import bullmq, arq, rq, celery, packaging"],
                      capture_output=True).returncode:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *PEERS.values(), *EXTRA], check=True)
    return str(python)


def versions(python: str) -> dict[str, str]:
    out = subprocess.run([python, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True,
                         check=True).stdout
    have = {p["name"].lower(): p["version"] for p in json.loads(out)}
    return {name: have.get(pkg, "?") for name, pkg in PEERS.items()}


class Run:
    """One system in one scenario: its worker process, samplers and the recorded handling."""

    def __init__(self, system: str, python: str, url: str, r: redis.Redis):
        self.system, self.python, self.url, self.r = system, python, url, r
        self.out = Path(tempfile.mkdtemp(prefix=f"bench-{system}-"))
        self.env = {**os.environ, "BENCH_OUT_DIR": str(self.out),
                    "PYTHONPATH": os.pathsep.join([str(ADAPTERS), str(ROOT)] if system == "delayq" else [str(ADAPTERS)])}
        self.script = str(ADAPTERS / f"{system}_adapter.py")
        self.workers: list[subprocess.Popen] = []
        self.peak_rss = self.peak_memory = 0
        self.cpu = 0.0
        self._stop = threading.Event()
        r.flushall()
        r.config_resetstat()
        self.memory_base = int(r.info("memory")["used_memory"])
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self):
        while not self._stop.is_set():
            self.peak_memory = max(self.peak_memory, int(self.r.info("memory")["used_memory"]))
            live = [w for w in self.workers if w.poll() is None]
            if live:
                usage = [tree_usage(w.pid) for w in live]
                self.peak_rss = max(self.peak_rss, max(rss for _, rss in usage))
                self.cpu = max(self.cpu, sum(cpu for cpu, _ in usage))
            time.sleep(0.2)

    def run(self, *args) -> None:
        subprocess.run([self.python, self.script, *args], env=self.env, check=True, cwd=ROOT)

    def start_worker(self) -> float:
        started = time.time() * 1000
        self.workers = [subprocess.Popen([self.python, self.script, "worker", self.url, str(CONCURRENCY)],
                                         env=self.env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         start_new_session=True) for _ in range(WORKERS)]
        return started

    def handled(self) -> list[tuple[float, float]]:
        rows = []
        for f in self.out.glob("*.txt"):
            for line in f.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2:
                    rows.append((float(parts[0]), float(parts[1])))
        return rows

    def wait_handled(self, n: int) -> bool:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if sum(f.read_bytes().count(b"\n") for f in self.out.glob("*.txt")) >= n:
                return True
            for w in self.workers:
                if w.poll() is not None:
                    raise SystemExit(f"{self.system} worker exited: {w.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
        return False

    def finish(self) -> dict:
        live = [w for w in self.workers if w.poll() is None]
        if live:
            self.cpu = max(self.cpu, sum(tree_usage(w.pid)[0] for w in live))
        self._stop.set()
        self._sampler.join()
        stats = self.r.info("commandstats")
        commands = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config"))
        for w in self.workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGTERM)
        for w in self.workers:
            try:
                w.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()
        return {"commands": commands, "cpu": self.cpu, "rss": self.peak_rss,
                "memory": self.peak_memory - self.memory_base}


def lateness(rows) -> dict:
    values = sorted(max(0.0, handled - due) for due, handled in rows)
    if not values:
        return {}
    q = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return {"p50": q[49], "p95": q[94], "p99": q[98], "max": values[-1]}


def scenario(name: str, system: str, python: str, url: str, r: redis.Redis, n: int) -> dict:
    run = Run(system, python, url, r)
    try:
        if name == "drain":
            t0 = time.time() * 1000
            run.run("publish", url, str(n), "5")
            time.sleep(max(0.0, (t0 + 5_000 - time.time() * 1000) / 1000) + 0.1)   # every message due
            start = run.start_worker()
            done = run.wait_handled(n)
        elif name == "live":
            run.start_worker()
            time.sleep(3)   # let the worker connect
            start = time.time() * 1000
            run.run("publish", url, str(n), "5")
            done = run.wait_handled(n)
        else:
            run.start_worker()
            time.sleep(3)
            start = time.time() * 1000
            run.run("light", url, str(n), "200", "1")
            done = run.wait_handled(n)
        rows = run.handled()
        usage = run.finish()
    finally:
        run._stop.set()
        for w in run.workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
    first = min((h for _, h in rows), default=start)
    last = max((h for _, h in rows), default=start)
    # drain: from the first message handled (the worker is up) to the last; the start-up until
    # then is reported apart. live and light: from the first publish to the last handled.
    span = (last - first) if name == "drain" else (last - start)
    return {"system": system, "scenario": name, "n": n, "handled": len(rows), "done": done,
            "rate": len(rows) / max(0.001, span / 1000), "first_ms": first - start, **lateness(rows),
            "cpu_ms": 1000 * usage["cpu"] / max(1, len(rows)), "cmds": usage["commands"] / max(1, len(rows)),
            "rss": usage["rss"], "memory": usage["memory"]}


def fmt(res: dict) -> list[str]:
    if not res["handled"]:
        return [res["system"], "nothing handled", "", "", "", "", ""]
    note = "" if res["handled"] >= res["n"] else f" ({res['handled']:,} of {res['n']:,} in {TIMEOUT:.0f} s)"
    rate = f"{res['rate']:,.0f}{note}"
    if res["scenario"] == "drain":
        rate += f" (first after {res['first_ms'] / 1000:.1f} s)"
    return [res["system"], rate,
            f"{res['p50']:,.1f} / {res['p95']:,.1f} / {res['p99']:,.1f} / {res['max']:,.0f}",
            f"{res['cpu_ms']:.3f}", f"{res['cmds']:.1f}", f"{res['rss'] / 2**20:,.0f}",
            f"{res['memory'] / 2**20:,.1f}"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5,000 messages instead of 50,000; light for 5 s")
    parser.add_argument("--only", nargs="+", choices=SYSTEMS, help="run only these systems")
    parser.add_argument("--write", action="store_true", help="record the tables in bench/RESULTS.md")
    parser.add_argument("--workers", type=int, default=1, help="worker processes per system (default 1)")
    args = parser.parse_args(argv)
    global WORKERS
    WORKERS = args.workers
    n = 5_000 if args.quick else 50_000
    light_n = 1_000 if args.quick else 2_000
    python = peers_python()
    vers = {"delayq": "this tree", **versions(python)}
    tmp = tempfile.mkdtemp(prefix="bench-peers-redis-")
    server = localserver.start(data_dir=tmp)
    r = redis.Redis.from_url(server.url)
    results = []
    try:
        for name, count in (("drain", n), ("live", n), ("light", light_n)):
            for system in args.only or SYSTEMS:
                print(f"{name:6} {system:7} ...", end=" ", flush=True)
                res = scenario(name, system, sys.executable if system == "delayq" else python, server.url, r, count)
                results.append(res)
                print(" | ".join(fmt(res)[1:]), flush=True)
    finally:
        server.stop()
    header = ["system", "msg/s", "lateness ms p50 / p95 / p99 / max", "worker CPU ms/msg", "Redis cmds/msg",
              "worker peak RSS MiB", "Redis peak MiB"]
    sections = []
    for name in ("drain", "live", "light"):
        rows = [r for r in results if r["scenario"] == name]
        base = next((r for r in rows if r["system"] == "delayq" and r["handled"]), None)
        lines = ["| " + " | ".join(header + ["delayq vs it"]) + " |", "|" + "---|" * (len(header) + 1)]
        for res in rows:
            ratio = ""
            if base and res["system"] != "delayq" and res["handled"]:
                ratio = f"{base['rate'] / res['rate']:.1f}x the rate"
                if name != "drain":
                    times = res["p99"] / max(base["p99"], 0.01)
                    ratio += f", p99 {times:.1f}x lower" if times >= 1 else f", p99 {1 / times:.1f}x higher"
            lines.append("| " + " | ".join(fmt(res) + [ratio]) + " |")
        sections.append((name, lines))
        print(f"\n{name}\n" + "\n".join(lines))
    if args.write:
        write_tables(sections, vers, n, light_n, args.only)
    return 0


def write_tables(sections, vers, n, light_n, only=None) -> None:
    """The default run (every system, one worker process) writes the "peers" section; a run with
    --workers N or --only writes its own beside it."""
    section = "peers" if WORKERS == 1 and not only else f"peers-{WORKERS}w-{'-'.join(only or SYSTEMS)}"
    command = "python -m bench.peers" + (f" --workers {WORKERS}" if WORKERS > 1 else "") + (
        f" --only {' '.join(only)}" if only else "")
    body = [f"## Side by side with peers (`{command}`)", "",
            f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC. Run on {machine()}. Versions: "
            + ", ".join(f"{k} {v}" for k, v in vers.items()) + f". One fresh Redis (flushed between runs), {WORKERS} "
            f"worker process{'es' if WORKERS > 1 else ''} with concurrency {CONCURRENCY} each (rq: a pool of "
            f"{CONCURRENCY} processes, it runs one job at a time per process; lean: one thread, the limit reference, "
            f"bench/peers/adapters/lean_adapter.py); delayq's Worker with its defaults; the handler decodes the JSON "
            f"payload and appends a line to a file; drain and live with {n:,} messages, light with {light_n:,} at "
            "200/s.", ""]
    titles = {"drain": "Drain: all due, then the worker starts", "live": "Live: publishing while the worker runs",
              "light": "Light: 200 msg/s paced"}
    for name, lines in sections:
        body += [f"### {titles[name]}", "", *lines, ""]
    replace_section(section, "\n".join(body).rstrip())


if __name__ == "__main__":
    sys.exit(main())
