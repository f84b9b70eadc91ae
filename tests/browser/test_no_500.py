"""No page can 500 on data delayq wrote, in a real browser: an admin clicks through the overview to
every topic (the Celery bridge's `celery.celery` among them: clicking it, and its Adopt button, was a
500), every state tab of every group, a message of each, and adopts what Django does not manage yet."""

import pytest
from django.contrib.auth.models import Group
from playwright.sync_api import expect

from dashboard import roles
from tests.browser.test_dashboard import log_in
from tests.dashboard.conftest import ensure_roles
from tests.dashboard.test_smoke import STATES, every_kind_of_topic  # noqa: F401 - shared fixture

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def admin_login(django_user_model, live_server, site_queue, settings):
    ensure_roles()
    user = django_user_model.objects.create_user("ada", password="s3cret-pass", is_staff=True)
    user.groups.add(Group.objects.get(name=roles.group_name("admin")))
    return live_server.url, "ada", "s3cret-pass"


def test_finding_celery_topic_and_its_adopt_button_are_a_500(page, admin_login, every_kind_of_topic):  # noqa: F811
    q = every_kind_of_topic
    base, user, password = admin_login
    log_in(page, base, user, password)
    statuses = {}

    def visit(url):
        response = page.goto(url)
        statuses[url] = response.status
        assert response.status < 500, f"{url}: {response.status}"

    page.get_by_role("link", name="celery.celery", exact=True).first.click()
    expect(page.locator("h1")).to_contain_text("celery.celery")
    adopt = page.get_by_role("button", name="Adopt")
    if adopt.count():
        with page.expect_navigation() as adopted:
            adopt.first.click()
        assert adopted.value is None or adopted.value.status < 500
        expect(page.locator("body")).not_to_contain_text("Server Error")
    for topic in q.topics():
        for group in q.groups(topic) or ["default"]:
            for state in STATES:
                visit(f"{base}/topics/{topic}/{group}/{state}/")
                for message in q.peek(topic, state, limit=2, group=group):
                    visit(f"{base}/topics/{topic}/{group}/messages/{message.id}/")
    assert len(statuses) >= 5 * 4 and all(s == 200 for s in statuses.values()), statuses
