"""Demo topics, a demo login and live traffic for the run command. Some messages fail on purpose so
the retrying and dead-letter views have something to show.

python -m config.demo setup     configure topics, create the demo login, print it
python -m config.demo traffic   publish a steady trickle of demo messages until stopped
"""

import os
import random
import secrets
import signal
import sys
import threading
from pathlib import Path

from queue_core import DelayQueue, Reject, RetryPolicy

VAR = Path(__file__).resolve().parent.parent / "var"
DEMO_TOPICS = {
    "orders": RetryPolicy.exponential(base=1, factor=2, max_delay=60, max_attempts=4, jitter=0.1),
    "emails": RetryPolicy.fixed(3, max_attempts=3),
    "webhooks": RetryPolicy.custom([2, 5, 15], max_attempts=4),
}


def handle(message) -> None:
    """The demo handler: payloads say how they should fail."""
    body = message.json()
    failure = body.get("fail")
    if failure == "timeout":
        raise TimeoutError(f"upstream 10.0.{random.randint(0, 9)}.{random.randint(1, 254)} timed out after 5000 ms")
    if failure == "invalid":
        raise Reject(f"invalid email address {body.get('to', '?')!r}")
    if failure == "flaky" and random.random() < 0.6:
        raise ConnectionError("connection reset by peer")


def setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from dashboard.models import RetryPolicy, Topic

    # Demo topics are defined in Django (managed), like a real deployment's; saving syncs Redis.
    for topic, p in DEMO_TOPICS.items():
        policy, _ = RetryPolicy.objects.get_or_create(name=f"{topic} (demo)", defaults=dict(
            kind=p.kind, base_delay=p.base, factor=p.factor, max_delay=p.max_delay, schedule=list(p.schedule),
            jitter=p.jitter, max_attempts=p.max_attempts, description="Created by the run command's demo."))
        Topic.objects.get_or_create(name=topic, defaults=dict(
            retry_policy=policy, visibility_timeout=20, owner="demo team",
            redaction_rules=["to"] if topic == "emails" else [],
            description=f"Demo traffic for {topic}; some of it fails on purpose."))
    VAR.mkdir(exist_ok=True)
    pw_file = VAR / "demo_password"
    if not pw_file.exists():
        pw_file.write_text(secrets.token_urlsafe(12))
        pw_file.chmod(0o600)
    password = pw_file.read_text().strip()
    User = get_user_model()
    user, _ = User.objects.get_or_create(username="demo", defaults={"is_staff": True, "is_superuser": True})
    user.set_password(password)
    user.save()
    print(f"demo login: demo / {password}")


def traffic() -> None:
    url = os.environ.get("DELAYQ_REDIS_URL") or os.environ["REDIS_URL"]
    q = DelayQueue.from_url(url, actor="demo-traffic")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    n = 0
    while not stop.wait(0.5):
        n += 1
        q.publish("orders", {"order": n, "fail": random.choices([None, "flaky", "timeout"], [85, 10, 5])[0]},
                  delay=random.choice([0, 0, 2, 10, 30]))
        if n % 3 == 0:
            q.publish("emails", {"to": f"user{n}@example.com" if n % 15 else "user@", "fail":
                                 "invalid" if n % 15 == 0 else None}, delay=random.choice([0, 5]))
        if n % 4 == 0:
            q.publish("webhooks", {"hook": n, "fail": "timeout" if n % 8 == 0 else "flaky"}, delay=1)


if __name__ == "__main__":
    {"setup": setup, "traffic": traffic}[sys.argv[1]]()
