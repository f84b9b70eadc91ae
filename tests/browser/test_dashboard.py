"""An operator in a real browser: log in, replay one dead letter (of one consumer group), run a bulk
replay to 100 %, find a topic among 1,000."""

import re

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import expect

from dashboard import roles
from queue_core import MessageState
from queue_core import RetryPolicy as EnginePolicy
from tests.conftest import start_worker
from tests.dashboard.conftest import ensure_roles
from tests.dashboard.openapi_check import answer_errors
from tests.dashboard.test_pages import kill

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def operator_login(django_user_model, live_server, site_queue, settings):
    ensure_roles()
    user = django_user_model.objects.create_user("olga", password="s3cret-pass")
    user.groups.add(Group.objects.get(name=roles.group_name("operator")))
    return live_server.url, "olga", "s3cret-pass"


def log_in(page, base, username, password):
    page.goto(f"{base}/")
    expect(page).to_have_url(f"{base}/login/?next=/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Topics")


def test_replay_one_dead_letter(page, operator_login, site_queue, artifacts):
    base, user, password = operator_login
    ids = kill(site_queue, "orders", [f'{{"order": {i}}}' for i in range(3)])
    site_queue.publish("emails", "hello")
    log_in(page, base, user, password)
    page.screenshot(path=str(artifacts / "overview.png"), full_page=True)
    page.click("a[href='/topics/orders/']")
    page.click("nav.tabs a.dead")
    expect(page).to_have_url(f"{base}/topics/orders/default/dead/")
    expect(page.locator("nav.tabs a.current")).to_have_text(re.compile(r"^dead\s+3$"))   # the tab with its count
    row = page.locator(f"#msg-{ids[0]}")
    expect(row).to_be_visible()
    expect(page.locator("#counts [data-state=ready] .n")).to_have_text("0")
    page.screenshot(path=str(artifacts / "topic-dead.png"), full_page=True)
    row.get_by_role("button", name="Replay").click()
    expect(row).to_have_count(0)
    expect(page.locator("#counts [data-state=ready] .n")).to_have_text("1")
    expect(page.locator("#counts [data-state=dead] .n")).to_have_text("2")
    assert site_queue.get("orders", ids[0]).state is MessageState.ready


def test_bulk_replay_progress_reaches_100(page, operator_login, site_queue, celery_env, artifacts):
    base, user, password = operator_login
    kill(site_queue, "orders", [str(i) for i in range(600)])
    worker = start_worker(celery_env)
    try:
        log_in(page, base, user, password)
        # The operation page refreshes on the operator's interval (the refresh control): every 2 s,
        # and ~6 s of replay (100/s), so the running state is seen on its way to done.
        page.get_by_test_id("live-interval").select_option("2")
        page.goto(f"{base}/topics/orders/dead/")
        page.get_by_role("link", name="Replay all matching…").click()
        expect(page.get_by_test_id("replay-count")).to_have_text("600")
        page.fill("input[name=rate_limit]", "100")
        page.get_by_role("button", name="Replay 600 dead letters of group default in orders").click()
        expect(page.get_by_test_id("op-status")).to_have_text("running", timeout=15_000)
        page.screenshot(path=str(artifacts / "operation-running.png"), full_page=True)
        expect(page.get_by_test_id("op-percent")).to_have_text("100 %", timeout=30_000)
        expect(page.get_by_test_id("op-status")).to_have_text("done")
        expect(page.get_by_test_id("op-moved")).to_have_text("600")
        page.screenshot(path=str(artifacts / "operation-done.png"), full_page=True)
    finally:
        worker.terminate()
        worker.wait(30)
    assert site_queue.counts("orders")[MessageState.ready] == 600


def test_a_secret_in_an_error_is_masked_for_a_viewer_and_revealed_for_an_admin(
        page, browser, django_user_model, live_server, site_queue, artifacts):
    ensure_roles()
    for username, role, staff in (("vic", "viewer", False), ("ada", "admin", True)):
        user = django_user_model.objects.create_user(username, password="s3cret-pass", is_staff=staff)
        user.groups.add(Group.objects.get(name=roles.group_name(role)))
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(0, max_attempts=1))
    mid = site_queue.publish("orders", '{"user": "ann", "password": "hunter2-long"}')
    try:
        raise PermissionError("login failed for ann with password hunter2-long")
    except PermissionError as exc:
        site_queue.nack(site_queue.claim("orders")[0], exc)
    base = live_server.url

    log_in(page, base, "vic", "s3cret-pass")
    page.goto(f"{base}/topics/orders/messages/{mid}/")
    expect(page.get_by_test_id("error")).to_contain_text("login failed for ann with password ••••••")
    expect(page.get_by_test_id("payload")).not_to_contain_text("hunter2")
    expect(page.get_by_role("button", name="Reveal in full")).to_have_count(0)
    page.screenshot(path=str(artifacts / "message-redacted.png"), full_page=True)

    admin = browser.new_page()
    log_in(admin, base, "ada", "s3cret-pass")
    admin.goto(f"{base}/topics/orders/messages/{mid}/")
    expect(admin.get_by_test_id("payload")).not_to_contain_text("hunter2")
    admin.get_by_role("button", name="Reveal in full").click()
    expect(admin.get_by_test_id("revealed")).to_be_visible()
    expect(admin.get_by_test_id("payload")).to_contain_text("hunter2-long")
    expect(admin.get_by_test_id("error")).to_contain_text("password hunter2-long")
    admin.goto(f"{base}/audit/?action=payload.reveal")
    expect(admin.locator("#entries tbody tr")).to_have_count(1)
    expect(admin.locator("#entries tbody tr")).to_contain_text("ada")
    admin.screenshot(path=str(artifacts / "audit-reveal.png"), full_page=True)
    admin.close()


def test_the_overview_search_finds_one_topic_among_1000(page, operator_login, site_queue, artifacts):
    base, user, password = operator_login
    for i in range(1000):
        site_queue.publish(f"shop{i:04d}", "x")
    log_in(page, base, user, password)
    expect(page.get_by_test_id("topic-range")).to_have_text("Topics 1–50 of 1000 · page 1 of 20")
    expect(page.locator("tr[data-topic]")).to_have_count(50)
    page.get_by_test_id("topic-search").fill("shop0777")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("tr[data-topic]")).to_have_count(1)
    expect(page.locator("tr[data-topic=shop0777] td.ready a")).to_have_text("1")
    page.screenshot(path=str(artifacts / "overview-search.png"), full_page=True)


def test_switch_group_and_replay_one_dead_letter_of_that_group(page, operator_login, site_queue, artifacts):
    """Two groups share the messages of orders; billing's dead letter is replayed in the browser
    and only billing's counts change, on its page and on the overview."""
    base, user, password = operator_login
    site_queue.configure_topic("orders", retry=EnginePolicy.fixed(0, max_attempts=1))
    site_queue.configure_group("orders", "billing", retry=EnginePolicy.fixed(0, max_attempts=1))
    ids = site_queue.publish_many("orders", ['{"order": 1}', '{"order": 2}'])
    for d in site_queue.claim("orders", 2, group="billing"):
        site_queue.nack(d, "card declined")
    log_in(page, base, user, password)
    page.click("a[href='/topics/orders/']")
    expect(page.get_by_test_id("current-group")).to_have_text("default")
    expect(page.locator("#counts [data-state=ready] .n")).to_have_text("2")
    page.get_by_test_id("group-switcher").get_by_role("link", name="billing").click()
    expect(page).to_have_url(f"{base}/topics/orders/billing/ready/")
    expect(page.get_by_test_id("current-group")).to_have_text("billing")
    page.click("nav.tabs a.dead")
    expect(page).to_have_url(f"{base}/topics/orders/billing/dead/")
    expect(page.locator("#counts [data-state=dead] .n")).to_have_text("2")
    row = page.locator(f"#msg-{ids[0]}")
    row.get_by_role("button", name="Replay").click()
    expect(row).to_have_count(0)
    expect(page.locator("#delayq-messages")).to_contain_text("Replayed 1 message of group billing.")
    expect(page.locator("#counts [data-state=dead] .n")).to_have_text("1")
    expect(page.locator("#counts [data-state=ready] .n")).to_have_text("1")
    page.screenshot(path=str(artifacts / "topic-group-billing.png"), full_page=True)
    # The default group did not move: its page still shows both ready and nothing dead.
    page.get_by_test_id("group-switcher").get_by_role("link", name="default").click()
    expect(page).to_have_url(f"{base}/topics/orders/default/dead/")
    expect(page.locator("#counts [data-state=ready] .n")).to_have_text("2")
    expect(page.locator("#counts [data-state=dead] .n")).to_have_text("0")
    # The overview expands orders into its groups.
    page.goto(f"{base}/")
    page.get_by_test_id("toggle-groups").click()
    expect(page.locator("tr.group-row[data-group=billing] td.dead a")).to_have_text("1")
    expect(page.locator("tr.group-row[data-group=default] td.ready a")).to_have_text("2")
    page.screenshot(path=str(artifacts / "overview-groups.png"), full_page=True)
    assert site_queue.get("orders", ids[0], group="billing").state is MessageState.ready
    assert site_queue.get("orders", ids[0]).state is MessageState.ready
    assert site_queue.counts("orders")[MessageState.dead] == 0


def test_create_a_token_in_the_browser_publish_with_it_then_revoke_it(page, operator_login, site_queue, artifacts):
    import json
    import urllib.error
    import urllib.request

    base, user, password = operator_login
    site_queue.configure_topic("orders")
    log_in(page, base, user, password)
    page.click("nav a[href='/tokens/']")
    page.fill("input[name=name]", "php shop")
    page.click("form.token-create button[type=submit]")
    secret = page.get_by_test_id("new-token").inner_text().strip()
    page.screenshot(path=str(artifacts / "api-token-created.png"), full_page=True)

    def publish():
        request = urllib.request.Request(f"{base}/api/topics/orders/messages/", method="POST",
                                         data=json.dumps({"payload": {"order": 1}}).encode(),
                                         headers={"Authorization": f"Bearer {secret}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    status, answer = publish()
    assert status == 201 and json.loads(site_queue.get("orders", answer["id"]).payload) == {"order": 1}
    assert answer_errors("POST", "/api/topics/{name}/messages/", status, answer) == []   # as api/schema/ says
    page.reload()
    row = page.locator("tr", has_text="php shop")
    expect(row.locator(".badge")).to_have_text("active")
    expect(page.get_by_test_id("new-token")).to_have_count(0)    # shown once
    page.goto(f"{base}/tokens/")      # past the reload's "sent already" notice, pinned over the page
    row = page.locator("tr", has_text="php shop")
    # The curl line is ready to run against this site, with a copy button (copy.js unhides it).
    expect(page.get_by_test_id("curl-list")).to_contain_text(f"{base}/api/topics/")
    expect(page.locator("button.copy[data-copy=curl-list]")).to_be_visible()
    row.get_by_role("link", name="Revoke…").click()     # asks first, on a page of its own
    expect(page.locator("h1")).to_contain_text("Revoke the API token php shop?")
    page.get_by_test_id("confirm-revoke").click()
    expect(page.locator("tr", has_text="php shop").locator(".badge")).to_have_text("revoked")
    status, answer = publish()
    assert status == 401 and "revoked" in answer["error"]


def test_finding_held_rows_are_marked_and_link_to_their_holder(page, operator_login, site_queue):
    base, user, password = operator_login
    site_queue.configure_group("orders", "default", ordered=True)
    holder = site_queue.publish("orders", "first", order_key="acct-a")
    waiting = [site_queue.publish("orders", f"a{i}", order_key="acct-a") for i in range(2)]
    plain = site_queue.publish("orders", "later", delay=3600)
    site_queue.claim("orders", 10)
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/orders/default/pending/")
    for msg_id in waiting:
        expect(page.locator(f"#msg-{msg_id}").get_by_test_id("held-by")).to_have_text(f"held by …{holder[-8:]}")
    expect(page.locator(f"#msg-{plain}").get_by_test_id("held-by")).to_have_count(0)
    page.locator(f"#msg-{waiting[0]}").get_by_role("link", name=f"…{holder[-8:]}").click()
    expect(page).to_have_url(f"{base}/topics/orders/default/messages/{holder}/")
    expect(page.locator("main")).to_contain_text("unacked")
