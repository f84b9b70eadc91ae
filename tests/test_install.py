"""Install check: the wheel carries templates, static files and migrations, and works in somebody
else's Django project mounted under a URL prefix."""

import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

FOREIGN_SETTINGS = textwrap.dedent("""
    import os
    SECRET_KEY = "foreign-project-test-key-0123456789-abcdefghijklmnopqrstuvwxyz"
    DEBUG = False
    ALLOWED_HOSTS = ["testserver"]
    INSTALLED_APPS = ["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                      "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles",
                      "django_htmx", "dashboard"]
    MIDDLEWARE = ["django.contrib.sessions.middleware.SessionMiddleware",
                  "django.middleware.csrf.CsrfViewMiddleware",
                  "django.contrib.auth.middleware.AuthenticationMiddleware",
                  "django.contrib.messages.middleware.MessageMiddleware",
                  "django_htmx.middleware.HtmxMiddleware"]
    ROOT_URLCONF = "foreign.urls"
    TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
                  "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                                     "django.contrib.auth.context_processors.auth",
                                                     "django.contrib.messages.context_processors.messages"]}}]
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.path.join(os.path.dirname(__file__), "db.sqlite3")}}
    STATIC_URL = "static/"
    USE_TZ = True
    DELAYQ_REDIS_URL = os.environ["DELAYQ_REDIS_URL"]
""")

FOREIGN_URLS = textwrap.dedent("""
    from django.contrib import admin
    from django.urls import include, path
    urlpatterns = [path("admin/", admin.site.urls), path("ops/", include("dashboard.urls"))]
""")

CHECK = textwrap.dedent("""
    import os, django
    os.environ["DJANGO_SETTINGS_MODULE"] = "foreign.settings"
    django.setup()
    import dashboard
    from django.contrib.staticfiles import finders
    from django.contrib.auth.models import User
    from django.test import Client
    from queue_core import DelayQueue
    assert "site-packages" in dashboard.__file__ and "{root}" not in dashboard.__file__, dashboard.__file__
    css = finders.find("dashboard/dashboard.css")
    assert css and "site-packages" in css, css
    DelayQueue.from_url(os.environ["DELAYQ_REDIS_URL"]).publish("installed-topic", "x")
    from django.contrib.auth.models import Group
    user = User.objects.create_user("op", password="pw")
    user.groups.add(Group.objects.get(name="Viewer"))  # created by the dashboard's data migration
    client = Client()
    client.force_login(user)
    response = client.get("/ops/")
    body = response.content.decode()
    assert response.status_code == 200, response.status_code
    assert "installed-topic" in body and "/static/dashboard/dashboard.css" in body and "htmx" in body, body[:500]
    from django.template.loader import get_template
    origin = get_template("dashboard/overview.html").origin.name
    assert origin.startswith(os.path.dirname(dashboard.__file__)), origin
    print("INSTALL-CHECK-OK")
""")


def test_wheel_installs_into_a_foreign_project(tmp_path, redis_url):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    wheel = next(dist.glob("delayq-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "dashboard/templates/dashboard/overview.html" in names
    assert "dashboard/templates/dashboard/base.html" in names
    assert "dashboard/static/dashboard/dashboard.css" in names
    assert "dashboard/migrations/__init__.py" in names
    assert "dashboard/migrations/0001_initial.py" in names and "dashboard/migrations/0002_groups.py" in names
    assert any(n.startswith("queue_core/lua/") and n.endswith("claim.lua") for n in names)
    assert not any(n.startswith(("config/", "tests/")) for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    vpy = venv / "bin" / "python"
    # Dependencies come from this project's environment (no network); the package itself must
    # come from the wheel, so the project's own site-packages goes *after* the venv's.
    vsite = Path(subprocess.check_output([str(vpy), "-c", "import site; print(site.getsitepackages()[0])"],
                                         text=True).strip())
    deps = [p for p in site.getsitepackages() if Path(p).exists()]
    (vsite / "zz_project_deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([str(vpy), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, timeout=300)

    project = tmp_path / "proj"
    (project / "foreign").mkdir(parents=True)
    (project / "foreign" / "__init__.py").write_text("")
    (project / "foreign" / "settings.py").write_text(FOREIGN_SETTINGS)
    (project / "foreign" / "urls.py").write_text(FOREIGN_URLS)
    env = {"PATH": "/usr/bin:/bin", "DELAYQ_REDIS_URL": redis_url, "PYTHONNOUSERSITE": "1"}
    subprocess.run([str(vpy), "-m", "django", "migrate", "--noinput", "--settings", "foreign.settings"],
                   cwd=project, env={**env, "PYTHONPATH": str(project)}, check=True, capture_output=True, timeout=300)
    result = subprocess.run([str(vpy), "-c", CHECK.replace("{root}", str(ROOT))], cwd=project,
                            env={**env, "PYTHONPATH": str(project)}, capture_output=True, text=True, timeout=300)
    assert "INSTALL-CHECK-OK" in result.stdout, result.stdout + result.stderr
