"""Redis instructions per message: python -m bench.redis_instructions [--messages N] [--groups G]

Wall-clock CPU on a shared 2-core VM varies by about 30 % between runs, too much to compare two
designs that differ by 10 %. This runs redis-server under valgrind's callgrind, which counts the
instructions Redis executes: the same for the same workload on every run. The workload is the hot
path only: publish_many, then claim and ack_many in batches of 100, events on. Collection is
switched on just before each phase, so start-up and script loading are not counted.

Needs valgrind (Debian: apt-get install valgrind) and redis-server on PATH.
"""

import argparse
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time

import redis

from queue_core import DelayQueue


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def total_instructions(out_file: str) -> int:
    found = {}
    with open(out_file) as fh:
        for line in fh:
            if line.startswith(("summary:", "totals:")):
                found[line.split(":")[0]] = int(line.split()[1])
    if not found:
        raise RuntimeError(f"no totals in {out_file}")
    return max(found.values())


def measure(messages: int, groups: int, batch: int = 100, keep: bool = False, fairness_keys: int = 0,
            priorities: bool = False, key_limits: bool = False, calls: int = 1) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix="delayq-cg-")
    port = free_port()
    out = os.path.join(tmp, "callgrind.out.%p")
    server = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                               shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", tmp,
                               # Under valgrind the workload runs ~50x slower: Redis's timer (hz times
                               # a second) would be counted in proportion to that wall time.
                               "--hz", "1", "--dynamic-hz", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port, retry=None, socket_connect_timeout=1)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        q = DelayQueue(client, actor="cg")
        for g in range(1, groups):
            q.configure_group("t", f"g{g}")
        if key_limits:   # limits that never hold anything back: what computing them costs
            q.ack_many(q.claim("t", 1, group="default") or [])
            q.publish("t", b"x")                             # the topic exists (limits need it)
            q.ack_many(q.claim("t", 1))
            for g in range(groups):
                q.configure_group("t", "default" if g == 0 else f"g{g}", key_rate=(1_000_000, 1.0),
                                  max_in_flight_per_key=100_000)
        q.ack_many(q.claim("t", 1) or [])                    # load the scripts outside the count
        q.publish_many("warm", [b"x"] * 10)
        q.ack_many(q.claim("warm", 10))
        phases = {}

        def counted(name, work):
            subprocess.run(["callgrind_control", "--zero", str(server.pid)], check=True, capture_output=True)
            subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True, capture_output=True)
            work()
            subprocess.run(["callgrind_control", "-i", "off", str(server.pid)], check=True, capture_output=True)
            subprocess.run(["callgrind_control", "--dump", str(server.pid)], check=True, capture_output=True)
            dumps = sorted(glob.glob(os.path.join(tmp, "callgrind.out.*")), key=os.path.getmtime)
            phases[name] = total_instructions(dumps[-1]) / messages

        payloads = [b"x" * 100] * messages
        def publish():
            # One call per (key, priority): messages/n each, keys and priorities interleaved.
            n = max(calls, fairness_keys, 10 if priorities else 1)
            for c in range(n):
                q.publish_many("t", payloads[c::n], priority=c % 10 if priorities else 0,
                               fairness_key=f"tenant-{c % fairness_keys}" if fairness_keys else None)
        counted("publish", publish)

        def drain(group):
            # As a worker with prefetch does: about 500 deliveries in flight, acked a few batches
            # after their claim (so the leases hash and unacked ZSET are no small listpacks).
            in_flight = []
            while True:
                ds = q.claim("t", batch, group=group)
                if ds:
                    in_flight.append(ds)
                if len(in_flight) > 4 or (not ds and in_flight):
                    q.ack_many(in_flight.pop(0))
                elif not ds:
                    return
        for g in range(groups):
            counted(f"claim+ack group {g}", lambda g=g: drain("default" if g == 0 else f"g{g}"))
        return phases
    finally:
        server.terminate()
        server.wait(60)
        if keep:
            print(f"callgrind files kept in {tmp} (callgrind_annotate FILE shows where)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--batch", type=int, default=100, help="messages per claim call (default 100)")
    parser.add_argument("--keep", action="store_true", help="keep the callgrind files for callgrind_annotate")
    parser.add_argument("--fairness-keys", type=int, default=0, help="publish under this many fairness keys")
    parser.add_argument("--priorities", action="store_true", help="publish with priorities 0-9")
    parser.add_argument("--key-limits", action="store_true",
                        help="set key_rate and max_in_flight_per_key high enough never to hold anything back")
    parser.add_argument("--calls", type=int, default=1,
                        help="publish in this many calls (at least one per fairness key and priority)")
    args = parser.parse_args()
    phases = measure(args.messages, args.groups, batch=args.batch, keep=args.keep, fairness_keys=args.fairness_keys,
                     priorities=args.priorities, key_limits=args.key_limits, calls=args.calls)
    for name, value in phases.items():
        print(f"  {name:<24} {value:>12,.0f} instructions/msg")
    print(f"  {'lifecycle':<24} {sum(phases.values()):>12,.0f} instructions/msg (Redis, events on)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
