from django.core.management.base import BaseCommand, CommandError

from dashboard import audit, services
from dashboard.models import Topic
from dashboard.services.contracts import Unavailable


class Command(BaseCommand):
    help = "Write every Topic's configuration to Redis, reporting drift first; list unmanaged topics."

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true",
                            help="only report drift (exit code 1 when any topic differs); change nothing")

    def handle(self, *args, check: bool, **options):
        try:
            drifted = 0
            for topic in Topic.objects.select_related("retry_policy"):
                d = services.drift(topic)
                if d.in_sync:
                    self.stdout.write(f"{topic.name}: in sync")
                    continue
                drifted += 1
                if check:
                    self.stdout.write(self.style.WARNING(f"{topic.name}: drift: {d.describe()}"))
                    continue
                error = services.sync_topic(topic)
                if error:
                    raise CommandError(f"{topic.name}: {error}")
                self.stdout.write(self.style.SUCCESS(f"{topic.name}: repaired ({d.describe()})"))
            unmanaged = services.unmanaged_topics()
        except Unavailable as exc:
            raise CommandError(f"Redis is unreachable ({exc}); check DELAYQ_REDIS_URL / REDIS_URL.") from exc
        if unmanaged:
            self.stdout.write(f"unmanaged in Redis (adopt them on the dashboard): {', '.join(unmanaged)}")
        if not check:
            audit.record(None, "topic.sync", scope={"command": "dq_sync_topics"}, affected=drifted,
                         detail=f"{drifted} topic(s) repaired")
        if check and drifted:
            raise CommandError(f"{drifted} topic(s) differ from the database", returncode=1)
