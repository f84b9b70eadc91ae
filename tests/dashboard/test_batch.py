"""The batch page (q.batch()): counts, ETA and callbacks per group, linked from a member's page;
login and view_queue required; an unknown or malformed batch id is a 404."""

import re

import pytest
from django.urls import reverse

from dashboard.models import BulkOperation
from queue_core import MessageState, RetryPolicy

pytestmark = pytest.mark.django_db


@pytest.fixture
def batch(site_queue):
    site_queue.configure_topic("mail", retry=RetryPolicy.fixed(0, max_attempts=1))
    with site_queue.batch("mail", on_complete=("reports", "done"), on_dead=("alerts", "x")) as b:
        ids = b.publish_many(["a", "b", "c", "d"])
    first, second = site_queue.claim("mail", 2)
    site_queue.ack(first)
    site_queue.nack(second, ValueError("bounced"))
    return b, ids, {first.message.id, second.message.id}


def test_the_page_shows_counts_eta_and_callbacks(viewer, batch):
    b, _ids, _done = batch
    html = viewer.get(reverse("delayq:batch", args=["mail", b.id])).content.decode()
    for testid, value in (("total", "4"), ("acked", "1"), ("pending", "2")):
        assert f'data-testid="{testid}">{value}<' in html
    assert 'data-testid="dead"><a href="/topics/mail/default/dead/">1</a>' in html
    assert "at the rate members have ended" in html and "50 % ended" in html
    assert 'data-testid="callback-dead"' in html and 'data-testid="callback-complete"' in html
    assert html.count("not yet") == 1            # dead fired, complete not


def test_a_member_page_links_to_its_batch(viewer, batch, site_queue):
    b, ids, done = batch
    waiting = next(i for i in ids if i not in done)
    html = viewer.get(reverse("delayq:message", args=["mail", waiting])).content.decode()
    assert f'href="{reverse("delayq:batch", args=["mail", b.id])}"' in html
    plain = site_queue.publish("mail", "alone")
    assert 'data-testid="batch"' not in viewer.get(reverse("delayq:message", args=["mail", plain])).content.decode()


def test_unknown_or_malformed_batches_are_404_and_login_is_required(client, viewer, batch):
    b, _ids, _done = batch
    assert viewer.get(reverse("delayq:batch", args=["mail", "01JNOSUCHBATCH"])).status_code == 404
    assert viewer.get(reverse("delayq:batch", args=["mail", "x|y"])).status_code == 404
    assert viewer.get(reverse("delayq:batch", args=["mail", "a" * 65])).status_code == 404
    response = client.get(reverse("delayq:batch", args=["mail", b.id]))
    assert response.status_code == 302 and "login" in response["Location"]


def test_without_view_queue_it_is_403(nobody, batch):
    b, _ids, _done = batch
    assert nobody.get(reverse("delayq:batch", args=["mail", b.id])).status_code == 403


def test_replay_a_batchs_dead_letters_through_a_background_operation(operator, viewer, site_queue, monkeypatch,
                                                                      django_capture_on_commit_callbacks):
    """Preview (count, scope in words, signed), confirm, and the operation replays the batch's dead
    letters only: a dead letter of the same group outside the batch stays dead."""
    site_queue.configure_topic("mail", retry=RetryPolicy.fixed(0, max_attempts=1))
    outsider = site_queue.publish("mail", "not in the batch")
    with site_queue.batch("mail", on_success=("reports", "ok")) as b:
        b.publish_many([str(i) for i in range(5)])
    for d in site_queue.claim("mail", 10):
        site_queue.nack(d, ValueError("bounced"))
    page = operator.get(reverse("delayq:batch", args=["mail", b.id])).content.decode()
    link = f'{reverse("delayq:replay_all", args=["mail", "default"])}?batch={b.id}'
    assert f'href="{link}"' in page
    assert 'data-testid="replay-batch"' not in viewer.get(reverse("delayq:batch", args=["mail", b.id])).content.decode()
    html = operator.get(link).content.decode()
    assert f"members of batch {b.id}" in html and "Replay 5 dead letters of group default in mail" in html
    token = re.search(r'name="scope" value="([^"]+)"', html).group(1)
    queued = []
    monkeypatch.setattr("dashboard.actions.run_bulk_operation.apply_async", lambda args, **kw: queued.append(*args))
    assert 'data-testid="canary"' not in html
    canaried = operator.post(reverse("delayq:replay_all", args=["mail", "default"]), {"scope": token, "canary": "1"})
    assert canaried.status_code == 400 and b"without a canary" in canaried.content
    with django_capture_on_commit_callbacks(execute=True):
        operator.post(reverse("delayq:replay_all", args=["mail", "default"]), {"scope": token})
    op = BulkOperation.objects.get()
    assert (op.total, op.scope["batch"], queued) == (5, b.id, [op.pk])
    from dashboard.tasks import run_bulk_operation
    assert run_bulk_operation(op.pk) == "done"
    op.refresh_from_db()
    assert op.moved == 5
    assert site_queue.get("mail", outsider).state is MessageState.dead
    assert site_queue.batch_status("mail", b.id).of("default").pending == 5
    for d in site_queue.claim("mail", 10):
        site_queue.ack(d)
    assert [d.message.text() for d in site_queue.claim("reports", 10)] == ["ok"]   # replayed, acked: success
    assert operator.get(reverse("delayq:replay_all", args=["mail", "default"]) + "?batch=01NOPE").status_code == 404
    assert viewer.get(link).status_code == 403


def test_the_api_answers_the_batch_as_json(viewer, nobody, batch):
    b, _ids, _done = batch
    url = reverse("delayq:api_batch", args=["mail", b.id])
    body = viewer.get(url).json()
    assert (body["id"], body["topic"], body["group"], body["sealed_at"] is not None) == (b.id, "mail", None, True)
    assert body["callbacks"] == {"complete": "reports", "dead": "alerts"}
    [g] = body["groups"]
    assert (g["total"], g["acked"], g["dead"], g["pending"], list(g["fired"])) == (4, 1, 1, 2, ["dead"])
    assert viewer.get(reverse("delayq:api_batch", args=["mail", "01NOPE"])).status_code == 404
    assert viewer.get(reverse("delayq:api_batch", args=["mail", "x|y"])).json()["error"]
    assert nobody.get(url).status_code == 403


def test_finding_replay_confirm_of_a_trimmed_batch_is_404(operator, site_queue):
    """The batch's record went (trimmed) between the preview and the confirm: 404, not a 500."""
    site_queue.configure_topic("mail", retry=RetryPolicy.fixed(0, max_attempts=1))
    with site_queue.batch("mail") as b:
        b.publish("x")
    for d in site_queue.claim("mail", 10):
        site_queue.nack(d, ValueError("bounced"))
    url = reverse("delayq:replay_all", args=["mail", "default"])
    token = re.search(r'name="scope" value="([^"]+)"', operator.get(f"{url}?batch={b.id}").content.decode()).group(1)
    pk = site_queue.keys("mail", b.partition).p
    site_queue.redis.hdel(pk.batches, f"{b.id}|cb", f"{b.id}|c", f"{b.id}|s")   # as batch_trim does
    response = operator.post(url, {"scope": token})
    assert response.status_code == 404 and not BulkOperation.objects.exists()


def test_finding_a_callback_given_up_shows_on_the_page_and_in_the_api(viewer, site_queue):
    """A callback its topic refuses for good (too large for it) says so instead of waiting forever."""
    site_queue.configure_topic("mail", retry=RetryPolicy.fixed(0, max_attempts=1))
    with site_queue.batch("mail", on_dead=("alerts", "x" * 50)) as b:
        b.publish("x")
    site_queue.configure_topic("alerts", max_payload_bytes=10)   # shrunk after the open's check
    for d in site_queue.claim("mail", 10):
        site_queue.nack(d, ValueError("bounced"))
    html = viewer.get(reverse("delayq:batch", args=["mail", b.id])).content.decode()
    assert 'data-testid="callback-failed"' in html and "not published: alerts refused it" in html
    [g] = viewer.get(reverse("delayq:api_batch", args=["mail", b.id])).json()["groups"]
    assert list(g["failed"]) == ["dead"] and g["unsent"] == []


def _times(site_queue, b, *, opened_min_ago: float, ended_min_ago: float | None) -> None:
    """Moves the batch's opening, its ready members' due times and its last end (None: none
    recorded) back in time, as quiet minutes would."""
    now = site_queue.server_ms()
    k = site_queue.keys("mail", b.partition, "default")
    site_queue.redis.hset(k.p.batches, f"{b.id}|c", int(now - opened_min_ago * 60_000))
    ready = site_queue.batch_members("mail", b.id, [m.decode() for m in site_queue.redis.zrange(k.g.ready, 0, -1)])
    if ready:
        site_queue.redis.zadd(k.g.ready, {m: int(now - opened_min_ago * 60_000) for m in ready}, xx=True)
    if ended_min_ago is None:
        site_queue.redis.hdel(k.g.batches, f"{b.id}|t")
    else:
        site_queue.redis.hset(k.g.batches, f"{b.id}|t", int(now - ended_min_ago * 60_000))


def _eta(viewer, b) -> str:
    html = viewer.get(reverse("delayq:batch", args=["mail", b.id])).content.decode()
    return re.search(r'data-testid="eta">(.*?)</td>', html).group(1)


def test_finding_members_not_due_yet_are_waiting_not_stalled(viewer, site_queue):
    """Nothing ended 10 minutes after the open, but the members are due tomorrow: no alarm."""
    with site_queue.batch("mail", on_complete=("reports", "done")) as b:
        b.publish_many(["a", "b"], delay=86400)
    _times(site_queue, b, opened_min_ago=10, ended_min_ago=None)
    eta = _eta(viewer, b)
    assert "no progress" not in eta and "waiting: the first pending member is due at" in eta
    site_queue.redis.zadd(site_queue.keys("mail", b.partition, "default").g.pending,
                          {m: site_queue.server_ms() - 30_000 for m in site_queue.redis.zrange(
                              site_queue.keys("mail", b.partition, "default").g.pending, 0, -1)}, xx=True)
    eta = _eta(viewer, b)      # due half a minute ago: too short a quiet time to call it stalled
    assert "no progress" not in eta and "waiting" not in eta and "unknown: no member has ended yet" in eta


def test_finding_a_member_in_retry_backoff_is_waiting_not_stalled(viewer, site_queue):
    site_queue.configure_topic("mail", retry=RetryPolicy.fixed(3600, max_attempts=3))
    with site_queue.batch("mail", on_complete=("reports", "done")) as b:
        b.publish_many(["a", "b"])
    first, second = site_queue.claim("mail", 2)
    site_queue.ack(first)
    site_queue.nack(second, ValueError("bounced"))
    _times(site_queue, b, opened_min_ago=12, ended_min_ago=10)     # one ended 10 min ago, one waits an hour
    eta = _eta(viewer, b)
    assert "no progress" not in eta and "waiting: the first pending member is due at" in eta


def test_finding_a_batch_from_before_the_last_end_field_shows_its_eta(viewer, batch, site_queue):
    """Members ended (Acked 1) but no "|t" recorded when: the plain ETA, never "no member has ended"."""
    b, _ids, _done = batch
    _times(site_queue, b, opened_min_ago=10, ended_min_ago=None)
    eta = _eta(viewer, b)
    assert "no progress" not in eta and "no member has ended" not in eta
    assert "at the rate members have ended" in eta


def test_finding_a_stalled_batch_says_no_progress_not_a_stale_eta(viewer, batch, site_queue):
    b, _ids, _done = batch
    url = reverse("delayq:batch", args=["mail", b.id])
    _times(site_queue, b, opened_min_ago=12, ended_min_ago=10)     # two ended in 2 minutes, none in 10 since
    html = viewer.get(url).content.decode()
    assert "no progress in the last 10 min" in html and "no member has ended since" in html
    assert "at the rate members have ended" not in html
    assert viewer.get(reverse("delayq:api_batch", args=["mail", b.id])).json()["groups"][0]["eta_s"] is None
    _times(site_queue, b, opened_min_ago=60, ended_min_ago=5)      # slow (one end every ~28 min), not stalled
    html = viewer.get(url).content.decode()
    assert "no progress" not in html and "at the rate members have ended" in html
