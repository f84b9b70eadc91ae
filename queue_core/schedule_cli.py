"""``delayq scheduler``, ``delayq schedule add|list|pause|resume|run|delete`` and ``delayq celery-beat``
(see cli.py)."""

import argparse
import json
import sys
from datetime import datetime

from .cron import as_utc
from .errors import InvalidArgument
from .scheduler import Scheduler


def cmd_scheduler(q, args) -> int:
    Scheduler(q, max_sleep=args.max_sleep).run()
    return 0


def cmd_celery_beat(q, args) -> int:
    """Put the Celery app's beat_schedule into delayq, then fire ticks like `delayq scheduler`
    (run as many as you like: each tick fires once; the forwarder hands them to the broker)."""
    from .cli import load_bridge

    bridge = load_bridge(args.app)
    names = [s.name for s in bridge.import_beat_schedule()]
    print(f"{len(names)} periodic task(s) in delayq: {', '.join(names) or 'none'}", flush=True)
    Scheduler(bridge.queue, max_sleep=args.max_sleep).run()
    return 0


def _when(text: str | None, what: str) -> datetime | None:
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidArgument(f"--{what} {text!r}: expected an ISO 8601 time with its offset, "
                              "such as 2026-12-01T03:00:00+01:00") from None
    if value.tzinfo is None:
        raise InvalidArgument(f"--{what} {text!r}: give the time's UTC offset (e.g. +00:00)")
    return value


def cmd_schedule_add(q, args) -> int:
    s = q.upsert_schedule(args.name, topic=args.topic, cron=args.cron, every=args.every, tz=args.tz,
                          payload=args.payload.encode(), start=_when(args.start, "start"), end=_when(args.end, "end"),
                          max_runs=args.max_runs, catchup_window=args.catchup_window, overlap=args.overlap,
                          jitter=args.jitter)
    nxt = s.next_times(1)
    print(f"{s.name}: {s.description}; next tick {as_utc(nxt[0]).isoformat() if nxt else 'none'}")
    return 0


def _row(s) -> dict:
    last = s.ticks[0] if s.ticks else None
    return {"name": s.name, "topic": s.topic, "state": s.state, "expression": s.description,
            "next": [as_utc(t).isoformat() for t in s.next_times(3)] if not s.paused else [],
            "last_tick": as_utc(last.tick_ms).isoformat() if last else None,
            "last_outcome": last.outcome if last else None, "runs": s.runs, "missed": s.missed,
            "skipped": s.skipped, "paused_note": s.paused["note"] if s.paused else None}


def cmd_schedule_list(q, args) -> int:
    rows = [_row(s) for s in q.schedules()]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    if not rows:
        print("no schedules")
    for r in rows:
        print(f"{r['name']}  [{r['state']}]  -> {r['topic']}  {r['expression']}")
        print(f"    next: {', '.join(r['next']) or '-'}")
        print(f"    last tick: {r['last_tick'] or '-'} ({r['last_outcome'] or 'none yet'}); runs {r['runs']}, "
              f"missed {r['missed']}, skipped {r['skipped']}" + (f"; paused: {r['paused_note']}" if r['paused_note']
                                                                 else ""))
    return 0


def cmd_schedule_pause(q, args) -> int:
    q.pause_schedule(args.name, note=args.note)
    print(f"{args.name}: paused")
    return 0


def cmd_schedule_resume(q, args) -> int:
    nxt = q.resume_schedule(args.name)
    print(f"{args.name}: resumed; next tick {as_utc(nxt).isoformat() if nxt else 'none (ended)'}")
    return 0


def cmd_schedule_run(q, args) -> int:
    print(q.run_schedule_now(args.name))
    return 0


def cmd_schedule_backfill(q, args) -> int:
    start, end = _when(args.start, "from"), _when(args.end, "to")
    if start is None or end is None:
        raise InvalidArgument("give --from and --to")
    done = q.backfill_schedule(args.name, start, end, dry_run=args.dry_run)
    if args.dry_run:
        print(f"{args.name}: {len(done.ticks)} tick(s) in the range" + (
            f", {as_utc(done.ticks[0]).isoformat()} to {as_utc(done.ticks[-1]).isoformat()}" if done.ticks else ""))
    else:
        print(f"{args.name}: published {len(done.published)} tick(s); {len(done.existing)} were still there")
    return 0


def cmd_schedule_delete(q, args) -> int:
    if not q.delete_schedule(args.name):
        print(f"error: no schedule named {args.name!r}", file=sys.stderr)
        return 2
    print(f"{args.name}: deleted")
    return 0


def add_parsers(sub, common: argparse.ArgumentParser) -> None:
    sc = sub.add_parser("scheduler", parents=[common],
                        help="fire schedules' ticks (run as many as you like: each tick fires once)")
    sc.add_argument("--max-sleep", type=float, default=1.0,
                    help="longest sleep between looks, in seconds (new schedules are seen within it; default 1)")
    sc.set_defaults(func=cmd_scheduler)

    cb = sub.add_parser("celery-beat", parents=[common],
                        help="put a Celery app's beat_schedule into delayq and fire it (replaces `celery beat`)")
    cb.add_argument("--app", required=True, help="the Celery app, 'package.module:app' (with DelayqScheduling)")
    cb.add_argument("--max-sleep", type=float, default=1.0, help="as for `delayq scheduler` (default 1)")
    cb.set_defaults(func=cmd_celery_beat)

    s = sub.add_parser("schedule", parents=[common], help="add, list, pause, resume, run or delete schedules")
    ops = s.add_subparsers(dest="schedule_command", required=True)
    a = ops.add_parser("add", parents=[common], help="create or replace a schedule")
    a.add_argument("name")
    a.add_argument("--topic", required=True)
    timing = a.add_mutually_exclusive_group(required=True)
    timing.add_argument("--cron", help="cron expression: 5 fields, or 6 with seconds first")
    timing.add_argument("--every", type=float, help="interval in seconds (>= 0.1)")
    a.add_argument("--tz", default="UTC", help="IANA time zone of --cron (default UTC)")
    a.add_argument("--payload", default="", help="the payload of each tick's message")
    a.add_argument("--start", help="first possible tick, ISO 8601 with offset")
    a.add_argument("--end", help="last possible tick, ISO 8601 with offset")
    a.add_argument("--max-runs", type=int, default=0, help="end after this many ticks (default: no limit)")
    a.add_argument("--catchup-window", type=float, default=60.0,
                   help="seconds a late tick may still fire; older ones are counted missed (default 60)")
    a.add_argument("--overlap", choices=("allow", "skip", "buffer_one"), default="allow",
                   help="when the previous tick's message is not done yet (default allow)")
    a.add_argument("--jitter", type=float, default=0.0, help="delay each message by up to this many seconds")
    a.set_defaults(func=cmd_schedule_add)
    lst = ops.add_parser("list", parents=[common], help="every schedule: expression, next 3 ticks, last tick")
    lst.add_argument("--json", action="store_true", help="JSON instead of text")
    lst.set_defaults(func=cmd_schedule_list)
    pa = ops.add_parser("pause", parents=[common], help="stop firing a schedule")
    pa.add_argument("name")
    pa.add_argument("--note", default="", help="why (shown in lists)")
    pa.set_defaults(func=cmd_schedule_pause)
    bf = ops.add_parser("backfill", parents=[common], help="publish the ticks of a past time range")
    bf.add_argument("name")
    bf.add_argument("--from", dest="start", required=True, help="ISO 8601 with offset")
    bf.add_argument("--to", dest="end", required=True, help="ISO 8601 with offset, not in the future")
    bf.add_argument("--dry-run", action="store_true", help="only count the ticks")
    bf.set_defaults(func=cmd_schedule_backfill)
    for op, func, text in (("resume", cmd_schedule_resume, "fire a paused schedule again"),
                           ("run", cmd_schedule_run, "publish one tick now"),
                           ("delete", cmd_schedule_delete, "remove a schedule")):
        o = ops.add_parser(op, parents=[common], help=text)
        o.add_argument("name")
        o.set_defaults(func=func)
