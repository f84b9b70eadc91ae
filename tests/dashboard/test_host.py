"""What a host project relies on: settings with defaults and checks, delayq's own login, a clear
error (and nothing left behind) when the Celery broker is down, commands without the analytics extra."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import checks
from django.urls import reverse

from dashboard import conf
from dashboard.models import AnalyticsRun, AuditEntry, BulkOperation

from .test_pages import kill

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


def delayq_errors():
    return [m for m in checks.run_checks() if m.id and m.id.startswith("delayq.")]


def test_every_setting_has_a_default(settings):
    for name in ("DELAYQ_REDIS_URL", "DELAYQ_PREFIX", "DELAYQ_ARCHIVE_DIR", "DELAYQ_ANALYTICS_DIR",
                 "DELAYQ_ANALYTICS_DAYS", "DELAYQ_ARCHIVE_MAX_WAIT"):
        if hasattr(settings, name):
            delattr(settings, name)
    assert conf.redis_url() == "redis://127.0.0.1:6379/0" and conf.prefix() == "dq"
    assert conf.archive_dir() == str(Path(settings.BASE_DIR) / "var" / "delayq" / "archive")
    assert Path(conf.analytics_dir()).is_absolute() and conf.analytics_days() == 30
    assert delayq_errors() == []


@pytest.mark.parametrize("name, value, says", [
    ("DELAYQ_REDIS_URL", "localhost:6379", "is not a Redis URL"),
    ("DELAYQ_REDIS_URL", "redis+sentinel://10.0.0.1:26379", "SERVICE_NAME"),
    ("DELAYQ_REDIS_WAIT_REPLICAS", -1, "must be a whole number >= 0"),
    ("DELAYQ_REDIS_WAIT_TIMEOUT", 0, "must be a number of seconds"),
    ("DELAYQ_PREFIX", "my:app", "without braces, colons"),
    ("DELAYQ_ARCHIVE_DIR", "var/archive", "must be an absolute path"),
    ("DELAYQ_ANALYTICS_DAYS", "30", "must be a number >= 1"),
    ("DELAYQ_ARCHIVE_MAX_WAIT", -1, "must be a number >= 0"),
    ("DELAYQ_ROLE_NAMES", {"viewer": "same", "admin": "same"}, "the same group name"),
    ("DELAYQ_ROLE_NAMES", {"auditor": "x"}, "must map some of"),
])
def test_a_bad_setting_is_a_check_error_naming_it(settings, name, value, says):
    setattr(settings, name, value)
    errors = delayq_errors()
    assert len(errors) == 1 and errors[0].level == checks.ERROR and errors[0].id == "delayq.E001"
    assert errors[0].msg.startswith(name) and says in errors[0].msg


def test_redis_connection_settings_reach_the_engine(settings, tmp_path):
    from dashboard.services.engine import get_queue

    settings.DELAYQ_REDIS_URL = "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/2"
    settings.DELAYQ_REDIS_WAIT_REPLICAS = 1
    settings.DELAYQ_REDIS_WAIT_TIMEOUT = 0.25
    assert delayq_errors() == []
    q = get_queue()          # no connection is made until a command runs
    assert (q.wait_replicas, q.wait_timeout) == (1, 0.25)
    assert q.redis.connection_pool.service_name == "mymaster"
    settings.DELAYQ_REDIS_URL = "redis://127.0.0.1:6379/0"
    settings.DELAYQ_REDIS_TLS_CA_FILE = str(tmp_path / "ca.crt")
    messages = [e.msg for e in delayq_errors()]
    assert any(m.startswith("DELAYQ_REDIS_URL") and "use rediss://" in m for m in messages)
    assert any(m.startswith("DELAYQ_REDIS_TLS_CA_FILE") and "does not exist" in m for m in messages)
    settings.DELAYQ_REDIS_URL = "rediss://127.0.0.1:6380/0"
    (tmp_path / "ca.crt").write_text("not checked here: the TLS tests use real certificates")
    assert delayq_errors() == []


def test_anonymous_users_get_delayqs_own_login_page(client, viewer):
    response = client.get(reverse("delayq:overview"))
    assert response.status_code == 302 and response["Location"] == "/login/?next=/"
    page = client.get(response["Location"])
    assert page.status_code == 200 and "delayq/login.html" in [t.name for t in page.templates]
    # A Viewer is not staff: the admin's login would refuse them, delayq's does not.
    assert not viewer.user.is_staff
    done = client.post("/login/", {"username": "viewer", "password": "pw", "next": "/"})
    assert done.status_code == 302 and done["Location"] == "/"
    assert client.get("/").status_code == 200
    assert client.post(reverse("delayq:logout")).status_code == 302
    assert client.get("/").status_code == 302


def test_the_hosts_login_page_can_be_named(client, settings):
    settings.DELAYQ_LOGIN_URL = "/accounts/login/"
    response = client.get(reverse("delayq:overview"))
    assert response.status_code == 302 and response["Location"] == "/accounts/login/?next=/"


def _fresh_connections(app):
    """Drop Celery's cached connection and producer pools so the next call uses the current URLs."""
    if app._pool is not None:
        app._pool.force_close_all()
    app._pool = None
    app.amqp._producer_pool = None
    app._local.__dict__.pop("backend", None)


@pytest.fixture
def broker_down(monkeypatch):
    """Celery's broker and result store point at a port nothing listens on."""
    from config.celery import app

    monkeypatch.setattr(app.conf, "broker_url", "redis://127.0.0.1:9/1")
    monkeypatch.setattr(app.conf, "result_backend", "redis://127.0.0.1:9/2")
    _fresh_connections(app)
    yield
    monkeypatch.undo()
    _fresh_connections(app)


def test_replay_all_with_the_broker_down_says_so_and_leaves_no_operation(operator, site_queue, broker_down):
    kill(site_queue, "orders", ["x"])
    preview = operator.get(reverse("delayq:replay_all", args=["orders"]))
    ctx = preview.context
    response = operator.post(reverse("delayq:replay_all", args=["orders"]), {"scope": ctx["scope_token"]},
                             follow=True)
    assert response.status_code == 200
    text = response.content.decode()
    assert "redis://127.0.0.1:9/1" in text and "cannot be reached" in text and "worker" in text
    assert BulkOperation.objects.count() == 0
    entry = AuditEntry.objects.get(action="replay_operation.start")
    assert entry.result == "failed" and "cannot be reached" in entry.detail
    assert site_queue.counts("orders")["dead"] == 1          # nothing moved


def test_analytics_button_with_the_broker_down_leaves_no_pending_run(operator, broker_down):
    response = operator.post(reverse("delayq:analytics_run"), follow=True)
    assert "cannot be reached" in response.content.decode()
    assert AnalyticsRun.objects.count() == 0


def test_no_celery_app_is_a_check_warning():
    """A host project that never created a Celery app: checked in a clean process."""
    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'bare_settings'; django.setup(); "
            "from django.core import checks; print([m.id for m in checks.run_checks()])")
    out = _run_bare(code)
    assert "delayq.W001" in out.stdout, out.stdout + out.stderr


def _run_bare(code: str, *, block: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Python with settings that carry no Celery app (``config`` is not imported), optionally with
    some modules made unimportable."""
    blocker = "".join(f"sys.modules[{m!r}] = None; " for m in block)
    return subprocess.run([sys.executable, "-c", f"import sys; {blocker}{code}"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{ROOT}/tests/dashboard:{ROOT}"})


@pytest.mark.parametrize("command", [["dq_analytics"], ["dq_restore", "orders"], ["dq_archive", "--once"]])
def test_commands_without_the_analytics_extra_say_what_to_install(command):
    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'bare_settings'; django.setup(); "
            f"from django.core.management import call_command; call_command(*{command!r})")
    out = _run_bare(code, block=("pyarrow", "pyspark"))
    assert out.returncode != 0
    assert "CommandError" in out.stderr and "pip install 'delayq[analytics]'" in out.stderr, out.stderr[-2000:]


def test_redis_down_is_one_503_on_pages_and_the_api(viewer, settings):
    settings.DELAYQ_REDIS_URL = "redis://127.0.0.1:9/0"
    for url in ("/topics/orders/", "/topics/orders/messages/01ABC/"):
        page = viewer.get(url)
        assert page.status_code == 503 and "Redis is unreachable" in page.content.decode(), url
    api = viewer.get("/api/topics/orders/ready/")
    assert api.status_code == 503 and "Redis is unreachable" in api.json()["error"]
