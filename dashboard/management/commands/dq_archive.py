import time

from django.core.management.base import BaseCommand, CommandError

from dashboard.services import archive
from dashboard.services.contracts import Unavailable


class Command(BaseCommand):
    help = ("Archive every topic's event stream to Parquet under DELAYQ_ARCHIVE_DIR (at least once; "
            "each batch is acknowledged in Redis only after its file is durable).")

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true",
                            help="archive everything there now (not waiting for fuller files), then exit")
        parser.add_argument("--interval", type=float, default=5.0,
                            help="seconds between runs when not --once (default 5)")
        parser.add_argument("--topic", action="append", dest="topics", metavar="TOPIC",
                            help="only this topic (repeatable); default every registered topic")

    def handle(self, *args, once: bool, interval: float, topics: list[str] | None, **options):
        while True:
            try:
                report = archive.run_archiver(topics, flush=once)
            except archive.ArchiveUnavailable as exc:
                raise CommandError(str(exc)) from exc
            except Unavailable as exc:
                if once:
                    raise CommandError(f"Redis failed: {exc}") from exc
                self.stderr.write(f"Redis failed: {exc}; retrying in {interval:g} s")
                report = None
            if report is not None:
                style = self.style.ERROR if report.trimmed else self.style.SUCCESS
                self.stdout.write(style(f"archived to {archive.archive_dir()}: {report.describe()}"))
            if once:
                return
            time.sleep(interval)
