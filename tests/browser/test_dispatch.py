"""The topic page's dispatch line in a real browser (issue 33): the limits, what they hold back and
the largest fairness keys, redrawn by the live refresh when the reason changes."""

import pytest
from playwright.sync_api import expect

from tests.dashboard.test_limits import KEY, held_back_by_key

from .test_dashboard import log_in, operator_login  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def test_the_dispatch_line_shows_what_is_held_back_and_follows_the_acks(page, operator_login, site_queue,  # noqa: F811
                                                                         artifacts):
    base, user, password = operator_login
    asked = []
    page.on("request", lambda request: asked.append(request.url))
    ids, claimed = held_back_by_key(site_queue)
    log_in(page, base, user, password)
    page.get_by_test_id("live-interval").select_option("2")
    page.goto(f"{base}/topics/emails/default/ready/")
    expect(page.get_by_test_id("limits")).to_have_text("per fairness key 1 per 3600 s and 1 in flight")
    expect(page.get_by_test_id("held-back")).to_contain_text("3 of 3 ready messages held back by a fairness "
                                                             "key's in-flight limit (3)")
    keys = page.get_by_test_id("fairness-keys")
    expect(keys.locator("tbody tr").first).to_have_text(f"{KEY}2")    # escaped: the key's text, no bold
    expect(keys.locator("b")).to_have_count(0)
    page.screenshot(path=str(artifacts / "topic-dispatch.png"), full_page=True)
    # Acked: every key may have one more in flight, but its rate (1 an hour) is spent, so the next
    # claim (a worker's, woken by the acks) takes none and the page says the new reason.
    site_queue.ack_many(claimed)
    assert site_queue.claim("emails", 10) == []
    expect(page.get_by_test_id("held-back")).to_contain_text(
        "3 of 3 ready messages held back by a fairness key's rate limit (3)", timeout=10_000)
    expect(page.get_by_test_id("throttled")).to_contain_text("3 by a fairness key's rate limit")
    # Only regions are refreshed: the refresh control's data-live="on" was once asked for as a URL.
    assert asked and not [url for url in asked if url.endswith("/on")]
    page.click(f"a[href$='/{ids[2]}/']")
    expect(page.get_by_test_id("fairness-key")).to_have_text(KEY)
    expect(page.get_by_test_id("priority")).to_contain_text("0")
