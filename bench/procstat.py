"""CPU and memory of a process tree from /proc (Linux), for the benchmarks' samplers."""

import os

CLK = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants alive now."""
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    stack += [int(c) for c in fh.read().split()]
        except OSError:   # the process exited meanwhile
            continue
    return out


def tree_usage(pid: int) -> tuple[float, int]:
    """(CPU seconds including reaped children, RSS bytes) of a process tree."""
    cpu, rss = 0.0, 0
    for p in tree(pid):
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            cpu += sum(int(x) for x in fields[11:15]) / CLK     # utime stime cutime cstime
            with open(f"/proc/{p}/status") as fh:
                rss += next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS"))
        except (OSError, StopIteration):
            continue
    return cpu, rss
