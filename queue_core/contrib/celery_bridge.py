"""delayq as the scheduler of Celery's delayed tasks (countdown, ETA, ``self.retry(countdown=)``).

Celery keeps an ETA task in a worker's memory until it is due; on a Redis broker a countdown
longer than the broker's ``visibility_timeout`` is delivered again and runs several times. With

    app = Celery("mysite")
    DelayqScheduling(app, url="redis://127.0.0.1:6379/0")   # right after creating the app

every ``apply_async``/``delay`` with a countdown or ETA of at least ``min_delay`` seconds is
published to delayq instead (topic ``celery.<queue>``, the task id and retry count as the dedup
key), and a **forwarder** (``delayq celery-forwarder --app mysite.celery:app``) hands each task
to the broker when it is due, exactly as Celery would have sent it (headers, routing, priority,
expiry), acking in delayq only after the broker took it. A broker outage makes the forwarder nack:
the task is retried by the topic's policy, never dropped.

Exactly once: the forwarder is at least once (a forwarder killed between the broker's accept and
its ack in delayq forwards again), so each forwarded task carries its delayq message id and the
tasks' base class runs a given id once (a marker in Redis, kept 7 days). Tasks with their own
``base=`` class that overrides ``__call__`` must call ``super().__call__``.

Only the bridge writes ``celery.*`` topics, and it signs what it writes: each record carries an
HMAC-SHA256 over its topic, its dedup key and its canonical JSON. The forwarder never decodes a
task's body (the stored bytes go to the broker as they are, with their content type, for the Celery
worker to check against its ``accept_content``); it dead-letters, with the reason in the message's
history, any record that is unsigned, altered, signed with a key it does not have, names a task the
app does not register or a queue it does not declare, or uses a content type the app does not
accept. The signing key (see ``signing_keys()``): ``signing_key=`` given to DelayqScheduling, else
``DELAYQ_CELERY_SIGNING_KEYS`` from the environment (comma-separated: the first signs, all verify),
else one derived from Django's ``SECRET_KEY`` and ``SECRET_KEY_FALLBACKS``. To rotate, put the new
key first and keep the old one after it for as long as the longest countdown you schedule.

Not covered: chords and groups whose members carry an ETA are scheduled member by member
like any task; Celery's ``revoke()`` of a task still waiting in delayq cancels it there through
this bridge's hook on ``app.control.revoke`` (only from processes that installed the bridge).
"""

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from celery.app.amqp import task_message
from kombu.serialization import dumps as kombu_dumps
from kombu.serialization import prepare_accept_content
from kombu.utils.imports import symbol_by_name
from kombu.utils.objects import cached_property

from ..keys import BRIDGE_TOPIC_PREFIX, validate_topic
from ..message import Reject
from ..queue import DelayQueue
from ..retry import RetryPolicy

log = logging.getLogger("delayq.celery")

TOPIC_PREFIX = BRIDGE_TOPIC_PREFIX
FORWARD_HEADER = "delayq_fwd"
FORWARDED_AT_HEADER = "delayq_forwarded_ms"
RAN_TTL = 7 * 24 * 3600
# A broker outage must not lose a task: retry for as long as any outage lasts (about 12 days).
FORWARD_RETRY = RetryPolicy.exponential(base=1, factor=2, max_delay=60, max_attempts=20_000, jitter=0.1)
# Tasks are handed to the broker this much before they are due, with their ETA: the Celery worker
# then starts them on the dot by its own clock (the broker hop costs 10-30 ms otherwise).
DEFAULT_LEAD = 0.1
MAX_RETRIES_CANCELLED = 100   # revoke looks for a waiting schedule among this many retries of a task
_HEX_SIG = re.compile(r"[0-9a-f]{64}")
RECORD_VERSION = 2            # version 1 records (before signing) are refused as unsigned
SIGNING_KEYS_ENV = "DELAYQ_CELERY_SIGNING_KEYS"
# Why a derived key and not SECRET_KEY itself: a signature made for delayq never verifies anywhere
# else in the site, and the other way round.
_DJANGO_KEY_SALT = b"delayq.celery_bridge.record-signing"
_SIMPLE_OPTIONS = ("routing_key", "priority", "serializer", "compression", "delivery_mode", "exchange_type",
                   "expires")


class DelayqScheduling:
    """Install delayq as the scheduler of ``app``'s delayed tasks (see the module docstring)."""

    def __init__(self, app, url: str | None = None, *, queue: DelayQueue | None = None, min_delay: float = 1.0,
                 prefix: str = "dq", lead: float = DEFAULT_LEAD,
                 signing_key: str | bytes | Sequence[str | bytes] | None = None):
        if queue is None and url is None:
            raise ValueError("give the delayq Redis as url=... or queue=DelayQueue(...)")
        if not 0 <= lead < min_delay:
            raise ValueError(f"lead must be at least 0 and shorter than min_delay ({min_delay} s), got {lead!r}")
        self.app = app
        self.queue = queue or DelayQueue.from_url(url, prefix=prefix, actor="celery")
        self.min_delay = float(min_delay)
        self.lead = float(lead)
        self._send = None
        # Read on first use, not here: a Django project creates its Celery app before its settings
        # (and so SECRET_KEY) can be read.
        self._given_keys = signing_key
        self._keys: list[bytes] | None = None
        self._forward_queues: set[str] = set()
        # Installed through the app's classes, not its instances: creating app.amqp or app.control
        # here would load the configuration while a Django project is still importing its settings.
        self._install_scheduling()
        self._install_task_base()
        self._install_revoke()
        app.delayq_scheduling = self

    # -- scheduling ------------------------------------------------------------------------------

    def _install_scheduling(self) -> None:
        bridge = self
        if "amqp" in self.app.__dict__:       # already in use: wrap the instance's sender
            self._send = self.app.amqp.send_task_message
            self.app.amqp.send_task_message = self._send_or_schedule
            return

        class BridgedAMQP(symbol_by_name(self.app.amqp_cls)):
            @cached_property
            def send_task_message(self):
                bridge._send = self._create_task_sender()
                return bridge._send_or_schedule

        self.app.amqp_cls = BridgedAMQP

    def _sender(self):
        if self._send is None:
            self.app.amqp.send_task_message   # noqa: B018 - creating it records Celery's own sender
        return self._send

    def _send_or_schedule(self, producer, name, message, **options):
        eta = message.headers.get("eta")
        if eta:
            due = _parse_eta(eta)
            if (due - datetime.now(UTC)).total_seconds() >= self.min_delay:
                self.schedule(name, message, options, due)
                return None
        return self._send(producer, name, message, **options)

    def topic_for(self, options: dict) -> str:
        queue = options.get("queue")
        qname = getattr(queue, "name", queue) or options.get("routing_key") or self.app.conf.task_default_queue
        return validate_topic(f"{TOPIC_PREFIX}{qname}")

    def schedule(self, name: str, message, options: dict, due: datetime) -> str:
        topic, record = self.record(name, message, options)
        task_id = message.headers.get("id")
        key = f"{task_id}:{message.headers.get('retries') or 0}"
        self.sign(topic, key, record)
        # The delayq header carries only the task name (the dashboard's column); the task id is the
        # message key and the arguments are in the record: every byte here is kept per waiting task.
        # Forwarded ``lead`` early with its ETA kept: the Celery worker holds it for that moment and
        # starts it on the dot by its timer, instead of the broker hop's delay after it is due.
        return self.queue.publish(topic, _canonical(record), at=due - timedelta(seconds=self.lead), key=key,
                                  headers={"task": name})

    def record(self, name: str, message, options: dict) -> tuple[str, dict]:
        """(topic, unsigned record) of a task message as Celery would send it with ``options``."""
        headers = dict(message.headers)
        headers.update(options.get("headers") or {})
        serializer = options.get("serializer") or self.app.conf.task_serializer
        content_type, content_encoding, data = kombu_dumps(message.body, serializer=serializer)
        if isinstance(data, str):
            data = data.encode(content_encoding or "utf-8")
        kept = {k: options[k] for k in _SIMPLE_OPTIONS if options.get(k) is not None}
        queue = options.get("queue")
        if queue is not None:
            kept["queue"] = getattr(queue, "name", queue)
        exchange = options.get("exchange")
        if exchange is not None:
            kept["exchange"] = getattr(exchange, "name", exchange)
        record = {"v": RECORD_VERSION, "task": name, "headers": headers, "properties": dict(message.properties),
                  "content_type": content_type, "content_encoding": content_encoding,
                  "body": base64.b64encode(data).decode(), "options": kept}
        # Signed as it will read back (headers such as datetimes become strings in JSON).
        return self.topic_for(options), json.loads(json.dumps(record, default=str))

    def schedule_periodic(self, name: str, task: str, schedule, args=(), kwargs=None, options=None):
        """Put one periodic task into delayq (``celery_beat.schedule_periodic``)."""
        from .celery_beat import schedule_periodic

        return schedule_periodic(self, name, task, schedule, args, kwargs, options)

    def import_beat_schedule(self, beat_schedule: dict | None = None) -> list:
        """Put the app's ``beat_schedule`` into delayq (``celery_beat.import_beat_schedule``)."""
        from .celery_beat import import_beat_schedule

        return import_beat_schedule(self, beat_schedule)

    # -- signing ---------------------------------------------------------------------------------

    def signing_keys(self) -> list[bytes]:
        """The keys records are signed with (the first) and verified against (all): ``signing_key=``,
        else DELAYQ_CELERY_SIGNING_KEYS (comma-separated), else derived from Django's SECRET_KEY
        and SECRET_KEY_FALLBACKS. ValueError when none can be found."""
        if self._keys is None:
            self._keys = _find_signing_keys(self._given_keys)
        return self._keys

    def sign(self, topic: str, key: str, record: dict) -> dict:
        """Sign ``record`` (in place, and returned) for the message of ``topic`` with dedup ``key``."""
        record["sig"] = self._signature(self.signing_keys()[0], topic, key, record)
        return record

    @staticmethod
    def _signature(secret: bytes, topic: str, key: str, record: dict) -> str:
        # The topic and the dedup key are signed too: a genuine record copied into another topic
        # (another broker queue) or under another task id does not verify.
        signed = {k: v for k, v in record.items() if k != "sig"}
        text = f"delayq-celery-record\n{topic}\n{key}\n{_canonical(signed)}".encode()
        return hmac.new(secret, text, hashlib.sha256).hexdigest()

    def verified_record(self, message) -> dict:
        """The bridge record of ``message`` if it is one this bridge signed and may forward; Reject
        (the message goes dead with the reason) otherwise. Decodes JSON only: never the task body."""
        try:
            record = json.loads(message.payload)
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise Reject("not a Celery bridge record (not JSON): only DelayqScheduling writes celery.* topics") from None
        sig = record.get("sig") if isinstance(record, dict) else None
        if isinstance(sig, str) and not _HEX_SIG.fullmatch(sig):
            # compare_digest refuses non-ASCII text with a TypeError: that would be retried for days
            raise Reject("Celery bridge record with a malformed signature (not 64 hexadecimal digits)")
        if not isinstance(sig, str):
            raise Reject("unsigned Celery bridge record: only records signed by DelayqScheduling.schedule() are "
                         "forwarded (a record scheduled before signing, or published by hand)")
        key = message.key or ""
        periodic = record.get("periodic")
        if periodic is not None:
            # A periodic task's ticks share one record (celery_beat.py), signed for its schedule;
            # each tick's dedup key is that schedule's "schedule:<name>:<tick>".
            if not isinstance(periodic, str) or not key.startswith(f"schedule:{periodic}:"):
                raise Reject("periodic Celery bridge record outside its schedule's ticks: only the schedule "
                             f"{periodic!r} may publish it")
            key = f"schedule:{periodic}"
        if not any(hmac.compare_digest(sig, self._signature(k, message.topic, key, record))
                   for k in self.signing_keys()):
            raise Reject("Celery bridge record with a bad signature: it was altered after it was scheduled, "
                         "copied from another topic or task, or signed with a key this forwarder does not have "
                         f"(check {SIGNING_KEYS_ENV} / SECRET_KEY on both sides)")
        if record.get("v") != RECORD_VERSION:
            raise Reject(f"Celery bridge record of version {record.get('v')!r}; this forwarder reads version "
                         f"{RECORD_VERSION}")
        # Signed records come from the app itself; these checks hold the forwarder to what this app
        # declares even so (a producer with another app's configuration, a key shared too widely).
        name = record["task"]
        if record["headers"].get("task") != name or name not in self.app.tasks:
            raise Reject(f"task {name!r} is not registered in this Celery app: deploy it to the forwarder "
                         "(its app must import the task), then replay this message")
        queue = record["options"].get("queue") or record["options"].get("routing_key") \
            or self.app.conf.task_default_queue
        if queue not in self._declared_queues() or self.topic_for(record["options"]) != message.topic:
            raise Reject(f"queue {queue!r} is not declared by this Celery app (task_queues) nor forwarded by "
                         f"this forwarder, or does not belong to topic {message.topic}")
        if record["content_type"] not in prepare_accept_content(self.app.conf.accept_content):
            raise Reject(f"content type {record['content_type']!r} is not in this Celery app's accept_content")
        return record

    def _declared_queues(self) -> set[str]:
        return set(self.app.amqp.queues) | self._forward_queues | {self.app.conf.task_default_queue}

    def cancel(self, task_id: str) -> int:
        """Cancel the waiting schedules of ``task_id`` in every celery.* topic; returns how many."""
        done = 0
        for topic in self.queue.topics():
            if not topic.startswith(TOPIC_PREFIX):
                continue
            # The waiting schedule is the task's latest retry (earlier ones were forwarded): look
            # for all of them in one round trip.
            keys = [f"{task_id}:{r}" for r in range(MAX_RETRIES_CANCELLED)]
            ids = list(self.queue.find_by_keys(topic, keys).values())
            if ids:
                codes = self.queue.remove(topic, ids, event="cancelled", states=["pending", "ready", "retrying"],
                                          actor="celery:revoke")
                done += sum(1 for c in codes if c == 0)
        return done

    # -- forwarding ------------------------------------------------------------------------------

    def forward(self, message) -> None:
        """Hand one due task to the broker (a delayq handler: raising nacks, so it is retried)."""
        record = self.verified_record(message)
        # The body goes to the broker as the bytes schedule() serialised, with their content type:
        # never decoded here (the Celery worker checks it against its own accept_content).
        body = base64.b64decode(record["body"])
        properties = {**record["properties"], "content_type": record["content_type"],
                      "content_encoding": record["content_encoding"] or "binary"}
        headers = dict(record["headers"])
        # Forwarded ``lead`` early (or on time with lead 0): an ETA still ahead is kept, so the worker
        # waits for it (a moment, never beyond the broker's visibility_timeout); a passed one is dropped.
        eta = headers.get("eta")
        if not eta or _parse_eta(eta) <= datetime.now(UTC):
            headers["eta"] = None
        if record.get("periodic"):
            # Every tick of a periodic task is its own task: an id of its own, the same on each forward.
            task_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"delayq:{message.topic}:{message.id}"))
            headers["id"] = headers["root_id"] = properties["correlation_id"] = task_id
        headers[FORWARD_HEADER] = message.id
        headers[FORWARDED_AT_HEADER] = int(time.time() * 1000)   # lets a task measure the hop to it
        options = dict(record["options"])
        with self.app.producer_or_acquire() as producer:
            self._sender()(producer, record["task"], task_message(headers, properties, body, None),
                           retry=False, **options)

    def forwarder(self, queues: list[str] | None = None, **worker_options):
        """A delayq Worker that forwards the due tasks of ``queues`` (default: the app's queues).
        Only task names registered in the app are forwarded: import the task modules first
        (``delayq celery-forwarder`` does, as a Celery worker does: ``app.loader.import_default_modules()``)."""
        from ..worker import Worker

        self.signing_keys()   # no key: say so now, not on the first due task
        names = queues or list(self.app.amqp.queues) or [self.app.conf.task_default_queue]
        self._forward_queues.update(names)
        topics = [validate_topic(f"{TOPIC_PREFIX}{q}") for q in names]
        for topic in topics:
            # Only a topic that does not exist yet gets the forwarding policy: an operator's
            # configuration (and a pause) of an existing one is theirs, not reset by a restart.
            if not self.queue.is_configured(topic):
                self.queue.configure_topic(topic, retry=FORWARD_RETRY)
        return Worker(self.queue, {t: self.forward for t in topics}, **worker_options)

    # -- the worker side: each forwarded schedule runs once ---------------------------------------

    def first_run(self, forwarded_id: str) -> bool:
        key = f"{self.queue.prefix}:celery:ran:{forwarded_id}"
        return bool(self.queue.redis.set(key, 1, nx=True, ex=RAN_TTL))

    def _install_task_base(self) -> None:
        if "Task" in self.app.__dict__:       # the app's task base exists already: derive from it
            self.app.Task = self._task_base(self.app.Task)
        else:
            self.app.task_cls = self._task_base(symbol_by_name(self.app.task_cls))

    def _task_base(self, base):
        bridge = self

        class DelayqTask(base):
            abstract = True

            def __call__(self, *args, **kwargs):
                forwarded = getattr(self.request, FORWARD_HEADER, None)
                if forwarded and not self.request.called_directly and not bridge.first_run(forwarded):
                    log.warning("task %s[%s] was forwarded twice by delayq (%s); this copy is skipped",
                                self.name, self.request.id, forwarded)
                    return None
                return super().__call__(*args, **kwargs)

        return DelayqTask

    def _install_revoke(self) -> None:
        bridge = self

        def cancel_then(original):
            def revoke(task_id, *args, **kwargs):
                for tid in task_id if isinstance(task_id, list | tuple) else [task_id]:
                    bridge.cancel(tid)
                return original(task_id, *args, **kwargs)
            return revoke

        if "control" in self.app.__dict__:
            self.app.control.revoke = cancel_then(self.app.control.revoke)
            return

        class BridgedControl(symbol_by_name(self.app.control_cls)):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                self.revoke = cancel_then(super().revoke)

        self.app.control_cls = BridgedControl


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _find_signing_keys(given) -> list[bytes]:
    if given:
        keys = [given] if isinstance(given, str | bytes) else list(given)
    else:
        keys = [k.strip() for k in os.environ.get(SIGNING_KEYS_ENV, "").split(",") if k.strip()]
    if not keys:
        keys = _django_keys()
    keys = [k.encode() if isinstance(k, str) else bytes(k) for k in keys]
    if not keys or any(len(k) < 16 for k in keys):
        raise ValueError(f"the Celery bridge signs the tasks it schedules and needs a key of at least 16 "
                         f"characters on every process that schedules or forwards them: set {SIGNING_KEYS_ENV} "
                         f"(comma-separated, first signs), pass DelayqScheduling(..., signing_key=...), or run "
                         f"in a Django project (its SECRET_KEY is used)")
    return keys


def _django_keys() -> list[bytes]:
    """Keys derived from Django's SECRET_KEY (signs) and SECRET_KEY_FALLBACKS (verify): a site
    rotating its secret the Django way rotates this key with it."""
    try:
        from django.conf import settings
        from django.core.exceptions import ImproperlyConfigured
    except ImportError:
        return []
    if not (settings.configured or os.environ.get("DJANGO_SETTINGS_MODULE")):
        return []
    try:
        secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    except ImproperlyConfigured:
        return []
    return [hmac.new(str(s).encode(), _DJANGO_KEY_SALT, hashlib.sha256).digest() for s in secrets if s]


def _parse_eta(value) -> datetime:
    due = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return due if due.tzinfo else due.replace(tzinfo=UTC)
