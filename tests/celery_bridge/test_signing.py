"""The Celery bridge's records are signed and the forwarder never decodes a task body: a record in a
``celery.*`` topic that the bridge did not sign (or that was altered, copied, or names a task or
queue the app does not have) goes dead with the reason, and nothing of it runs (issue: an operator
could run code on the forwarder's host by publishing a pickle record)."""

import base64
import importlib
import json
import pickle
import sys

import pytest
from celery import Celery

from queue_core import DelayQueue, MessageState, Reject, RetryPolicy
from queue_core.celery_bridge import FORWARD_RETRY, SIGNING_KEYS_ENV, DelayqScheduling
from tests.celery_bridge.conftest import TOPIC, runs
from tests.conftest import wait_for


class _WritesAFile:
    """Unpickling this creates ``path``: the proof that a body was (or was not) deserialised."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _record(task="bridge.record", body=b'[[1, 0], {}, {}]', content_type="application/json", **extra):
    """A record shaped like the bridge's, written by hand (as an operator could publish one)."""
    headers = {"lang": "py", "task": task, "id": "forged-1", "retries": 0, "eta": None, "root_id": "forged-1"}
    record = {"v": 2, "task": task, "headers": headers, "properties": {"correlation_id": "forged-1"},
              "content_type": content_type, "content_encoding": "utf-8" if "json" in content_type else "binary",
              "body": base64.b64encode(body).decode(), "options": {}}
    record.update(extra)
    return json.dumps(record)


def _reject_reason(scheduling, q, msg_id):
    [message] = [m for m in q.peek(TOPIC, "ready") if m.id == msg_id]
    with pytest.raises(Reject) as caught:
        scheduling.forward(message)
    return str(caught.value)


def test_finding_pickle_record_published_by_an_operator_is_never_unpickled(bridge, tmp_path):
    """The critical finding: a record declaring application/x-python-serialize used to be unpickled in
    the forwarder. Now it is refused as unsigned (and with any forged signature as altered), before
    anything decodes its body."""
    module, start, q, broker = bridge
    scheduling = module.app.delayq_scheduling
    marker = tmp_path / "pwned"
    body = pickle.dumps(((), {}, {"callbacks": None}) + (_WritesAFile(marker),))
    unsigned = q.publish(TOPIC, _record(body=body, content_type="application/x-python-serialize"), key="p:0")
    forged = q.publish(TOPIC, _record(body=body, content_type="application/x-python-serialize", sig="00" * 32),
                       key="p2:0")
    assert "unsigned" in _reject_reason(scheduling, q, unsigned)
    assert "bad signature" in _reject_reason(scheduling, q, forged)
    assert not marker.exists() and broker.llen("celery") == 0


def test_finding_non_ascii_signature_retried_for_days(bridge):
    """compare_digest raised TypeError on a non-ASCII "sig": not a Reject, so the forwarder retried the
    record for the forwarding policy's ~12 days instead of dead-lettering it."""
    module, start, q, broker = bridge
    msg_id = q.publish(TOPIC, _record(sig="é" * 64), key="nonascii:0")
    assert "malformed signature" in _reject_reason(module.app.delayq_scheduling, q, msg_id)


def test_finding_forged_json_record_never_reaches_the_broker(bridge):
    """The high finding: a hand-written JSON record could run any registered task with any arguments."""
    module, start, q, broker = bridge
    scheduling = module.app.delayq_scheduling
    msg_id = q.publish(TOPIC, _record(), key="forged-1:0")
    assert "unsigned" in _reject_reason(scheduling, q, msg_id)
    not_json = q.publish(TOPIC, b"\x80not json", key="junk:0")
    assert "not JSON" in _reject_reason(scheduling, q, not_json)
    assert broker.llen("celery") == 0


def _genuine(module, q, countdown=30):
    result = module.record.apply_async(args=[1, 0], countdown=countdown)
    [message] = [m for m in q.peek(TOPIC, "pending") if m.key == f"{result.id}:0"]
    return message


def test_finding_signed_record_with_an_edited_task_name_is_refused(bridge):
    """A genuine record altered after it was signed (another task, other arguments, another queue)
    or copied under another task id or into another topic does not verify."""
    module, start, q, broker = bridge
    scheduling = module.app.delayq_scheduling
    message = _genuine(module, q)
    record = json.loads(message.payload)
    q.cancel(TOPIC, message.id)
    edited = dict(record, task="bridge.flaky", headers=dict(record["headers"], task="bridge.flaky"))
    ids = [q.publish(TOPIC, json.dumps(edited), key=message.key),
           q.publish(TOPIC, json.dumps(dict(record, body=base64.b64encode(b'[[666, 0], {}, {}]').decode())),
                     key="other-args:0"),
           q.publish(TOPIC, json.dumps(record), key="another-task-id:0")]
    for msg_id in ids:
        assert "bad signature" in _reject_reason(scheduling, q, msg_id)
    copied = q.publish("celery.other", json.dumps(record), key=message.key)
    [moved] = q.peek("celery.other", "ready")
    assert moved.id == copied
    with pytest.raises(Reject, match="bad signature"):
        scheduling.forward(moved)
    assert broker.llen("celery") == 0


def test_finding_unregistered_task_or_undeclared_queue_is_refused_even_when_signed(bridge):
    """Signed by the app itself, yet the forwarder still forwards only the app's registered task names
    to queues it declares or forwards."""
    module, start, q, broker = bridge
    scheduling = module.app.delayq_scheduling
    module.app.send_task("no.such.task", countdown=30)
    [message] = q.peek(TOPIC, "pending")
    q.deliver_now(TOPIC, message.id)
    assert "not registered" in _reject_reason(scheduling, q, message.id)
    module.record.apply_async(args=[1, 0], countdown=30, queue="undeclared")
    [elsewhere] = q.peek("celery.undeclared", "pending")
    # The sending process's app declared "undeclared" on the fly (task_create_missing_queues); a
    # forwarder process's app knows only its configured queues and the ones it forwards.
    sys.modules.pop("tests.celery_bridge.app", None)
    forwarding = importlib.import_module("tests.celery_bridge.app").app.delayq_scheduling
    with pytest.raises(Reject, match="not declared"):
        forwarding.forward(elsewhere)
    assert broker.llen("celery") == 0 and broker.llen("undeclared") == 0


def test_finding_bad_records_go_dead_with_the_reason_and_the_genuine_task_runs_once(bridge, tmp_path):
    """End to end with a real forwarder process and a real Celery worker: the pickle record, a forged
    JSON record and an altered signed record end dead with the reason in their history; a genuine
    countdown task scheduled beside them runs exactly once."""
    module, start, q, broker = bridge
    marker = tmp_path / "pwned"
    body = pickle.dumps(((), {}, {}) + (_WritesAFile(marker),))
    message = _genuine(module, q)
    record = json.loads(message.payload)
    q.cancel(TOPIC, message.id)
    altered = dict(record, task="bridge.flaky", headers=dict(record["headers"], task="bridge.flaky"))
    bad = [q.publish(TOPIC, _record(body=body, content_type="application/x-python-serialize"), key="p:0"),
           q.publish(TOPIC, _record(), key="forged-1:0"),
           q.publish(TOPIC, json.dumps(altered), key=message.key)]
    start("worker")
    start("forwarder")
    module.record.apply_async(args=[77, 0], countdown=1)
    wait_for(lambda: q.counts(TOPIC)["dead"] == 3 and len(runs(q)) == 1, 60, "three dead, one ran")
    for msg_id, words in zip(bad, ["unsigned", "unsigned", "bad signature"], strict=True):
        dead = q.get(TOPIC, msg_id)
        assert dead.state is MessageState.dead and dead.attempts == 1
        assert dead.last_error.type == "Reject" and words in dead.last_error.message
    assert [r.split("|")[0] for r in runs(q)] == ["77"]
    assert not marker.exists() and runs(q, "bridge:flaky") == []


def test_finding_forwarder_start_rewrote_configuration_and_unpaused_the_topic(bridge):
    """Starting a forwarder used to configure every bridge topic afresh (its operator's retry policy,
    lease and pause lost); now only a topic that does not exist yet gets the forwarding policy."""
    module, start, q, broker = bridge
    scheduling = module.app.delayq_scheduling
    q.configure_topic(TOPIC, retry=RetryPolicy.fixed(7, max_attempts=3), visibility_timeout=90)
    q.pause(TOPIC)
    scheduling.forwarder(concurrency=1)
    config = q.topic_config(TOPIC)
    assert config.paused and config.visibility_timeout == 90 and config.retry == RetryPolicy.fixed(7, max_attempts=3)
    scheduling.forwarder(queues=["fresh"], concurrency=1)
    assert q.topic_config("celery.fresh").retry == FORWARD_RETRY


def _job():
    pass


def test_signing_keys_rotate_the_first_signs_all_verify(redis_url):
    """Rotation: a record signed with the old key still forwards once the new key is first and the old
    one follows it; with the old key dropped it is refused."""
    q = DelayQueue.from_url(redis_url)
    app = Celery("rotate", broker="memory://", set_as_current=False)
    app.task(name="rot.job")(_job)
    old = DelayqScheduling(app, queue=q, min_delay=1.0, signing_key="old-key-0123456789")
    app.send_task("rot.job", countdown=30)
    [message] = q.peek("celery.celery", "pending")
    both = DelayqScheduling(Celery("r2", broker="memory://", set_as_current=False), queue=q,
                            signing_key=["new-key-0123456789", "old-key-0123456789"])
    both.app.task(name="rot.job")(_job)
    assert both.verified_record(message)["task"] == "rot.job"
    new_only = DelayqScheduling(Celery("r3", broker="memory://", set_as_current=False), queue=q,
                                signing_key="new-key-0123456789")
    with pytest.raises(Reject, match="bad signature"):
        new_only.verified_record(message)
    assert old.signing_keys() == [b"old-key-0123456789"]


def test_signing_key_comes_from_the_environment_or_django_and_a_missing_one_is_said(redis_url, monkeypatch, settings):
    q = DelayQueue.from_url(redis_url)
    app = Celery("keys", broker="memory://", set_as_current=False)
    monkeypatch.setenv(SIGNING_KEYS_ENV, "env-key-0123456789, env-old-0123456789")
    assert DelayqScheduling(app, queue=q).signing_keys() == [b"env-key-0123456789", b"env-old-0123456789"]
    monkeypatch.delenv(SIGNING_KEYS_ENV)
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "django-secret-" + "x" * 40, ["older-secret-" + "y" * 40]
    derived = DelayqScheduling(app, queue=q).signing_keys()
    assert len(derived) == 2 and b"django-secret" not in derived[0]     # derived, never the secret itself
    with pytest.raises(ValueError, match="at least 16 characters"):
        DelayqScheduling(app, queue=q, signing_key="short").signing_keys()


def test_the_subprocess_app_is_importable_without_a_django_key(monkeypatch):
    """The bridge test app carries its own key: it must not depend on the Django settings of the suite."""
    sys.modules.pop("tests.celery_bridge.app", None)
    module = importlib.import_module("tests.celery_bridge.app")
    assert module.app.delayq_scheduling.signing_keys()[0] == b"bridge-tests-signing-key-1"
    sys.modules.pop("tests.celery_bridge.app", None)

