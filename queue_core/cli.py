"""delayq {worker,publish,stats,replay,scheduler,schedule,limits,export,...} (also python -m queue_core) — see --help of each.

Global options (--url, --prefix, -v) work before or after the subcommand.
"""

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import json
import logging
import os
import sys

import redis

from . import connect
from .errors import QueueError
from .queue import AsyncDelayQueue, DelayQueue
from .schedule_cli import add_parsers as add_schedule_parsers
from .scheduler import Scheduler
from .states import MessageState
from .worker import AsyncWorker, Worker, is_async_callable

DEFAULT_URL = os.environ.get("DELAYQ_REDIS_URL") or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0"


def load_object(spec: str, option: str = "--handler"):
    """'package.module:name' -> the object, with a clear error when it is not there."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"{option} {spec!r}: expected 'package.module:name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"{option} {spec!r}: cannot import {module_name!r} ({exc}); is it on PYTHONPATH?") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SystemExit(f"{option} {spec!r}: module {module_name!r} has no attribute {attr!r}") from None


def load_handler(spec: str):
    """'package.module:function' -> the function, with a clear error when it is not there."""
    handler = load_object(spec)
    if not callable(handler):
        raise SystemExit(f"--handler {spec!r}: {spec.partition(':')[2]!r} is not callable")
    return handler


def cmd_worker(q: DelayQueue, args) -> int:
    # As celery and gunicorn do: a handler module in the directory the worker is started from imports.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    topics, handlers = args.topic, args.handler
    if len(handlers) == 1 and len(topics) > 1:
        handlers = handlers * len(topics)
    if len(handlers) != len(topics):
        raise SystemExit("give one --handler for all topics, or one --handler per --topic (in the same order)")
    loaded = {t: load_handler(h) for t, h in zip(topics, handlers, strict=True)}
    metrics = None
    if args.metrics_port is not None:
        from .contrib.metrics import WorkerMetrics

        metrics = WorkerMetrics(args.group, args.name or "worker")
        try:
            server = metrics.serve(args.metrics_port, args.metrics_host)
        except OSError as exc:
            raise SystemExit(f"--metrics-port {args.metrics_port}: cannot listen on {args.metrics_host} "
                             f"({exc})") from None
        logging.getLogger("delayq.worker").info("worker metrics at http://%s:%s/metrics", args.metrics_host, server.server_port)
    is_async = [is_async_callable(h) for h in loaded.values()]
    if any(is_async) and not all(is_async):
        raise SystemExit("the handlers mix async def and plain functions; run one worker per kind")
    # --schedules: this worker also fires schedules' ticks (any number of processes may: each tick fires once).
    scheduler = Scheduler(q) if args.schedules else None
    if scheduler is not None:
        scheduler.start()
    try:
        if any(is_async):
            return asyncio.run(_run_async_worker(args, loaded, metrics))
        worker = Worker(q, loaded, concurrency=args.concurrency, prefetch=args.prefetch, batch_size=args.batch,
                        grace=args.grace, name=args.name, max_lease=args.max_lease, group=args.group,
                        batch=args.handler_batch, metrics=metrics)
        worker.run()
        return 0
    finally:
        if scheduler is not None:
            scheduler.stop()
            scheduler.join(5)


async def _run_async_worker(args, handlers: dict, metrics) -> int:
    """async def handlers run in an AsyncWorker: ``--concurrency`` handlers at a time in one
    event loop (no threads)."""
    async with AsyncDelayQueue.from_url(args.url, prefix=args.prefix, tls=connect.tls_options_from_env() or None,
                                        wait_replicas=args.wait_replicas, wait_timeout=args.wait_timeout) as aq:
        worker = AsyncWorker(aq, handlers, concurrency=args.concurrency, prefetch=args.prefetch,
                             batch_size=args.batch, batch=args.handler_batch, grace=args.grace, name=args.name,
                             max_lease=args.max_lease, group=args.group, metrics=metrics)
        await worker.run()
    return 0


def load_bridge(spec: str):
    """The DelayqScheduling installed on the Celery app ``spec`` (--app), with the app's task
    modules imported, as a Celery worker does at start: only registered task names are forwarded
    or scheduled."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    app = load_object(spec, "--app")
    bridge = getattr(app, "delayq_scheduling", None)
    if bridge is None:
        raise SystemExit(f"--app {spec!r}: this Celery app has no DelayqScheduling installed; add "
                         "DelayqScheduling(app, url=...) right after creating it")
    app.loader.import_default_modules()
    return bridge


def cmd_celery_forwarder(q: DelayQueue, args) -> int:
    """Forward due Celery tasks scheduled through queue_core.contrib.celery_bridge to the Celery broker."""
    bridge = load_bridge(args.app)
    worker = bridge.forwarder(args.queue, concurrency=args.concurrency, name=args.name)
    worker.run()
    return 0


def cmd_publish(q: DelayQueue, args) -> int:
    payload = sys.stdin.buffer.read() if args.payload == "-" else args.payload
    headers = json.loads(args.headers) if args.headers else None
    if args.count > 1:
        ids = q.publish_many(args.topic, [payload] * args.count, delay=args.delay, headers=headers,
                             order_key=args.order_key, ttl=args.ttl, partition=args.partition,
                             fairness_key=args.fairness_key, priority=args.priority, after=args.after,
                             group=args.group)
    else:
        ids = [q.publish(args.topic, payload, delay=args.delay, key=args.key, headers=headers,
                         order_key=args.order_key, ttl=args.ttl, partition=args.partition,
                         fairness_key=args.fairness_key, priority=args.priority, dedup=args.dedup,
                         window=args.window, after=args.after, group=args.group)]
        if ids[0].outcome != "published":   # the key was held: say so beside the id (stderr)
            print(f"{ids[0].outcome}: the key {args.key!r} is held by this message", file=sys.stderr)
    print("\n".join(ids) if args.count <= 10 else f"published {len(ids)} messages to {args.topic}")
    return 0


def _rate_arg(text: str) -> tuple[int, float] | None:
    """'100/1' or '100/1.5' (count per seconds), or 'none'."""
    if text.lower() == "none":
        return None
    count, _, per = text.partition("/")
    try:
        return int(count), float(per or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected COUNT/SECONDS such as 100/1, or none; got {text!r}") from None


def _limit_arg(text: str) -> int | None:
    if text.lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or none; got {text!r}") from None


def _fairness_arg(text: str):
    if text == "round_robin":
        return text
    try:
        return json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'expected round_robin or JSON weights such as {{"acme": 3, "*": 1}}; '
                                         f"got {text!r}") from None


LIMIT_OPTIONS = ("rate", "max_in_flight", "key_rate", "max_in_flight_per_key", "fairness")


def cmd_limits(q: DelayQueue, args) -> int:
    """Show or change a group's dispatch limits; the group's other settings are kept. Running
    workers apply a change at their next claim."""
    changes = {name: getattr(args, name) for name in LIMIT_OPTIONS if getattr(args, name) is not ...}
    cfg = q.group_config(args.topic, args.group)
    if changes:
        cfg = q.configure_group(args.topic, args.group, cfg.replace(**changes))
    print(f"{args.topic} / {args.group}: {cfg.limits_in_words()}")
    return 0


def cmd_stats(q: DelayQueue, args) -> int:
    topics = args.topic or q.topics()
    if not topics:
        print("no topics")
        return 0
    states = [s.value for s in MessageState]
    width = max(len(t) for t in topics + ["topic"])
    print(f"{'topic':<{width}}  " + "  ".join(f"{s:>9}" for s in states) + "  workers")
    g = args.group
    for topic in topics:
        counts = q.counts(topic, group=g)
        row = "  ".join(f"{counts[MessageState(s)]:>9}" for s in states)
        print(f"{topic:<{width}}  {row}  {len(q.workers(topic, group=g)):>7}")
        if args.verbose:
            print("   lifetime:", ", ".join(f"{k} {v}" for k, v in sorted(q.stats(topic, group=g).items())))
            for eg in q.error_groups(topic, limit=5, group=g):
                print(f"   dead group {eg.fingerprint}: {eg.count} x {eg.error_type}: {eg.sample_message[:80]}")
    return 0


def cmd_replay(q: DelayQueue, args) -> int:
    if args.id:
        n = q.replay(args.topic, args.id, delay=args.delay, group=args.group)
        print(f"replayed {n} of {len(args.id)} (the rest were no longer dead)")
        return 0
    if args.dry_run:
        if args.fingerprint:
            groups = {g.fingerprint: g.count for g in q.error_groups(args.topic, limit=10_000, group=args.group)}
            n = groups.get(args.fingerprint, 0)
        else:
            n = q.counts(args.topic, group=args.group)[MessageState.dead]
        print(f"would replay {n} dead letters from {args.topic}")
        return 0

    def progress(total: int) -> None:
        print(f"\rreplayed {total}", end="", file=sys.stderr, flush=True)

    n = q.replay_dead(args.topic, fingerprint=args.fingerprint, batch=args.batch, delay=args.delay,
                      progress=progress if sys.stderr.isatty() else None, group=args.group)
    print(f"\nreplayed {n} dead letters from {args.topic}")
    return 0


def cmd_delete_group(q: DelayQueue, args) -> int:
    """Remove a consumer group and release its messages (bounded batches; payloads other groups
    still hold stay)."""
    held = sum(q.counts(args.topic, group=args.group).values()) if args.group in q.groups(args.topic) else 0
    if not args.yes:
        print(f"would delete group {args.group} of {args.topic} and its {held} message(s); "
              "run again with --yes to do it", file=sys.stderr)
        return 1

    def progress(total: int) -> None:
        print(f"\rreleased {total} of {held}", end="", file=sys.stderr, flush=True)

    n = q.delete_group(args.topic, args.group, progress=progress if sys.stderr.isatty() else None)
    print(f"\ndeleted group {args.group} of {args.topic}: {n} message(s) released")
    return 0


def cmd_export(q: DelayQueue, args) -> int:
    """One state of a group (or a query's matches) as JSON Lines or CSV, streamed to stdout or
    --out. Unredacted: the CLI reads Redis with the server's own credentials."""
    from . import export

    exported = 0

    def rows():
        nonlocal exported
        for m in export.messages(q, args.topic, args.state, args.query or None, group=args.group,
                                 partition=args.partition):
            exported += 1
            yield export.row(m)
    with open(args.out, "w", encoding="utf-8", newline="") if args.out else contextlib.nullcontext(sys.stdout) as out:
        for line in export.lines(args.format, rows()):
            out.write(line)
    print(f"exported {exported} {args.state} message(s) of group {args.group} in {args.topic}", file=sys.stderr)
    return 0


def version() -> str:
    try:
        return importlib.metadata.version("delayq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _env_number(name: str, kind):
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        raise SystemExit(f"{name}={value!r} is not a number") from None


def _global_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """The options every command takes. The main parser holds the defaults; each subcommand takes
    them again without defaults (SUPPRESS), so `delayq --url X stats` and `delayq stats --url X` agree."""
    def default(value):
        return value if defaults else argparse.SUPPRESS
    parser.add_argument("--url", default=default(DEFAULT_URL), help="Redis URL (default: $DELAYQ_REDIS_URL, "
                        "$REDIS_URL or redis://127.0.0.1:6379/0); redis+cluster://host:port for a cluster, "
                        "redis+sentinel://host:port[,host:port]/service[/db] for Sentinel")
    parser.add_argument("--prefix", default=default("dq"), help="key prefix (default: dq)")
    parser.add_argument("--wait-replicas", type=int, metavar="N",
                        default=default(_env_number("DELAYQ_REDIS_WAIT_REPLICAS", int)),
                        help="publishes and replays return only once N replicas acknowledged them "
                             "(default: $DELAYQ_REDIS_WAIT_REPLICAS or the URL's wait_replicas, else 0)")
    parser.add_argument("--wait-timeout", type=float, metavar="SECONDS",
                        default=default(_env_number("DELAYQ_REDIS_WAIT_TIMEOUT", float)),
                        help="how long to wait for those replicas (default: $DELAYQ_REDIS_WAIT_TIMEOUT or 2)")
    parser.add_argument("-v", "--verbose", action="store_true", default=default(False),
                        help="more detail in the output (stats: lifetime counters and error groups)")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, defaults=False)
    grouped = argparse.ArgumentParser(add_help=False)
    grouped.add_argument("--group", default="default", help="consumer group (default: default)")
    parser = argparse.ArgumentParser(prog="delayq", description="delayq: Redis delay queue")
    parser.add_argument("--version", action="version", version=f"delayq {version()}")
    _global_options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True)

    w = sub.add_parser("worker", parents=[common, grouped], help="consume topics with a handler")
    w.add_argument("--topic", action="append", required=True, help="topic to consume (repeatable)")
    w.add_argument("--handler", action="append", required=True, help="package.module:function (repeatable)")
    w.add_argument("--concurrency", type=int, default=8,
                   help="handler threads, or for async def handlers concurrent handlers (default 8)")
    w.add_argument("--prefetch", type=int, default=None,
                   help="unstarted messages held beyond one per handler (default: adapts, up to two claims)")
    w.add_argument("--batch", type=int, default=None,
                   help="messages per claim (default: adapts, up to 200 while there is a backlog)")
    w.add_argument("--handler-batch", type=int, default=None, metavar="N",
                   help="call the handler with a list of up to N messages (a batch handler)")
    w.add_argument("--grace", type=float, default=30.0, help="seconds in-flight handlers get on SIGTERM")
    w.add_argument("--max-lease", type=float, default=3600.0,
                   help="seconds a handler may hold a message (leases are extended until then; default 3600)")
    w.add_argument("--name", default=None, help="worker id shown on the dashboard")
    w.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                   help="serve this worker's Prometheus metrics on PORT (needs 'delayq[metrics]')")
    w.add_argument("--metrics-host", default="127.0.0.1",
                   help="address for --metrics-port (default 127.0.0.1; 0.0.0.0 for every interface)")
    w.add_argument("--schedules", action="store_true",
                   help="also fire schedules' ticks in this process (no separate `delayq scheduler` needed)")
    w.set_defaults(func=cmd_worker)

    f = sub.add_parser("celery-forwarder", parents=[common],
                       help="hand Celery tasks scheduled in delayq to the Celery broker when they are due")
    f.add_argument("--app", required=True, help="the Celery app, 'package.module:app' (with DelayqScheduling installed)")
    f.add_argument("--queue", action="append", help="Celery queue (repeatable; default: the app's queues)")
    f.add_argument("--concurrency", type=int, default=4, help="forwarding threads (default 4)")
    f.add_argument("--name", default=None, help="worker id shown on the dashboard")
    f.set_defaults(func=cmd_celery_forwarder)

    p = sub.add_parser("publish", parents=[common], help="publish a message")
    p.add_argument("--topic", required=True)
    p.add_argument("payload", help="payload text, or - to read bytes from stdin")
    p.add_argument("--delay", type=float, default=0, help="seconds until due")
    p.add_argument("--key", default=None, help="idempotency key")
    p.add_argument("--dedup", choices=("unique_for", "throttle", "debounce"), default=None,
                   help="unique_for: the key stays held --window s after the message is done; throttle: held "
                        "--window s from this publish; debounce: replace the key's unstarted message")
    p.add_argument("--window", type=float, default=None, help="seconds a dedup window lasts (unique_for, throttle)")
    p.add_argument("--after", default=None, help="a message id: publish when --group acks it (--delay counts from the ack)")
    p.add_argument("--group", default="default", help="with --after: the group whose ack releases it (the only one "
                                                      "that receives it)")
    p.add_argument("--order-key", default=None, help="ordering key (ordered groups handle one at a time)")
    p.add_argument("--ttl", type=float, default=None, help="seconds to live from now")
    p.add_argument("--partition", type=int, default=None, help="publish to this partition")
    p.add_argument("--headers", default=None, help="JSON object of headers")
    p.add_argument("--count", type=int, default=1, help="publish the payload this many times")
    p.add_argument("--fairness-key", default=None, help="fairness key (groups take turns between keys)")
    p.add_argument("--priority", type=int, default=0, help="0-9, higher is claimed first among due messages")
    p.set_defaults(func=cmd_publish)

    s = sub.add_parser("stats", parents=[common, grouped], help="counts per state for topics")
    s.add_argument("--topic", action="append", help="topic (repeatable; default: all)")
    s.set_defaults(func=cmd_stats)

    r = sub.add_parser("replay", parents=[common, grouped], help="replay dead letters")
    r.add_argument("--topic", required=True)
    r.add_argument("--id", action="append", help="message id (repeatable); default: all dead letters")
    r.add_argument("--fingerprint", default=None, help="only this error group")
    r.add_argument("--delay", type=float, default=0, help="replay into pending with this delay")
    r.add_argument("--batch", type=int, default=100, help="dead letters per script call (default 100)")
    r.add_argument("--dry-run", action="store_true", help="only count what would be replayed")
    r.set_defaults(func=cmd_replay)

    lim = sub.add_parser("limits", parents=[common, grouped],
                         help="show or set a group's rate, in-flight and fairness limits (applied live)")
    lim.add_argument("--topic", required=True)
    lim.add_argument("--rate", type=_rate_arg, default=..., help="COUNT/SECONDS for the whole group, or none")
    lim.add_argument("--max-in-flight", type=_limit_arg, default=..., help="unacked at once, or none")
    lim.add_argument("--key-rate", type=_rate_arg, default=..., help="COUNT/SECONDS per fairness key, or none")
    lim.add_argument("--max-in-flight-per-key", type=_limit_arg, default=..., help="per fairness key, or none")
    lim.add_argument("--fairness", type=_fairness_arg, default=..., help='round_robin or JSON weights {"acme": 3, "*": 1}')
    lim.set_defaults(func=cmd_limits)

    e = sub.add_parser("export", parents=[common, grouped],
                       help="write one state's messages (or a query's matches) as JSON Lines or CSV")
    e.add_argument("--topic", required=True)
    e.add_argument("--state", required=True, choices=[s.value for s in MessageState])
    e.add_argument("--query", default="", help="only the matches of this query, e.g. 'payload.customer.id:42 attempts>=3'")
    e.add_argument("--format", default="jsonl", choices=["jsonl", "csv"])
    e.add_argument("--partition", type=int, default=None, help="only this partition")
    e.add_argument("--out", default=None, help="write to this file (default: stdout)")
    e.set_defaults(func=cmd_export)

    d = sub.add_parser("delete-group", parents=[common], help="remove a consumer group and its messages")
    d.add_argument("--topic", required=True)
    d.add_argument("--group", required=True, help="the group to delete")
    d.add_argument("--yes", action="store_true", help="really delete (without it: say what would go)")
    d.set_defaults(func=cmd_delete_group)
    add_schedule_parsers(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # -v is about the output, not the log: DEBUG would turn on redis-py's per-command logging.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        # TLS files and options from DELAYQ_REDIS_TLS_* apply to rediss:// URLs (the URL's own win).
        q = DelayQueue.from_url(args.url, prefix=args.prefix, tls=connect.tls_options_from_env() or None,
                                wait_replicas=args.wait_replicas, wait_timeout=args.wait_timeout)
        return args.func(q, args)
    except QueueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except redis.RedisError as exc:
        print(f"error: Redis at {connect.redacted(args.url)} failed: {exc}", file=sys.stderr)
        return 2
