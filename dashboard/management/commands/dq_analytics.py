from django.core.management.base import BaseCommand, CommandError

from dashboard import analytics
from delayq_analytics.times import parse_time


class Command(BaseCommand):
    help = ("Run the Spark analytics job over the event archive and load its outputs for the dashboard's "
            "Analytics page. Needs Java 17+.")

    def add_arguments(self, parser):
        parser.add_argument("--since", type=parse_time, help="ISO date/time (UTC unless an offset is given)")
        parser.add_argument("--until", type=parse_time, help="ISO date/time, exclusive")

    def handle(self, *args, since, until, **options):
        try:
            run = analytics.create_run(trigger="command", since=since, until=until)
        except analytics.RunRefused as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"analytics run #{run.pk}: running the Spark job ...")
        run = analytics.execute(run.pk)
        if run.status != run.Status.DONE:
            raise CommandError(f"analytics run #{run.pk} failed: {run.error}")
        self.stdout.write(self.style.SUCCESS(
            f"analytics run #{run.pk} done in {run.duration.total_seconds():.1f} s: {run.events:,} events "
            f"({run.duplicates:,} duplicates dropped) loaded"))
