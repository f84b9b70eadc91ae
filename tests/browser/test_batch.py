"""The batch page in a real browser: from a member's message page to its batch, whose counts and
callbacks follow the members as they end."""

import pytest
from playwright.sync_api import expect

from queue_core import RetryPolicy
from tests.dashboard.test_batch import _times

from .test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_a_member_links_to_its_batch_page(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    site_queue.configure_topic("mail", retry=RetryPolicy.fixed(0, max_attempts=1))
    with site_queue.batch("mail", on_complete=("reports", "done"), on_dead=("alerts", "x")) as b:
        ids = b.publish_many(["a", "b", "c"])
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/mail/messages/{ids[0]}/")
    page.locator("[data-testid=batch] a").click()
    expect(page.locator("h1")).to_contain_text(f"Batch {b.id}")
    group = page.locator("[data-testid=batch-group-default]")
    expect(group.locator("[data-testid=total]")).to_have_text("3")
    expect(group.locator("[data-testid=eta]")).to_contain_text("unknown")
    expect(group.locator("[data-testid=callback-complete]")).to_contain_text("not yet")
    first, second, third = site_queue.claim("mail", 3)
    site_queue.nack(first, ValueError("bounced"))
    site_queue.ack(second)
    site_queue.ack(third)
    page.reload()
    expect(group.locator("[data-testid=pending]")).to_have_text("0")
    expect(group.locator("[data-testid=eta]")).to_have_text("done")
    expect(group.locator("[data-testid=acked]")).to_have_text("2")
    expect(group.locator("[data-testid=callback-complete]")).not_to_contain_text("not yet")
    group.locator("[data-testid=dead] a").click()
    expect(page).to_have_url(f"{base}/topics/mail/default/dead/")
    assert [d.message.text() for d in site_queue.claim("reports", 10)] == ["done"]


def test_finding_a_stalled_batch_page_says_no_progress(page, operator_login, site_queue):  # noqa: F811
    base, user, password = operator_login
    with site_queue.batch("mail") as b:
        b.publish_many(["a", "b", "c", "d"])
    site_queue.ack(site_queue.claim("mail", 1)[0])
    log_in(page, base, user, password)
    page.goto(f"{base}/topics/mail/batch/{b.id}/")
    eta = page.locator("[data-testid=batch-group-default] [data-testid=eta]")
    expect(eta).to_contain_text("at the rate members have ended")     # it just moved
    # 25 quiet minutes pass, with the members due all along (a stall, not a wait for their due time)
    _times(site_queue, b, opened_min_ago=30, ended_min_ago=25)
    page.reload()
    expect(eta).to_contain_text("no progress in the last 25 min")
    expect(eta).not_to_contain_text("at the rate")
