from django.core.management.base import BaseCommand, CommandError

from dashboard.services import archive
from delayq_analytics.times import parse_time


class Command(BaseCommand):
    help = ("Re-publish messages that retention evicted from the dead-letter queue, from the event archive "
            "(eviction events carry the whole message). Lists what matches; publishes only with --yes.")

    def add_arguments(self, parser):
        parser.add_argument("topic")
        parser.add_argument("--id", action="append", dest="ids", metavar="MESSAGE_ID", help="repeatable")
        parser.add_argument("--fp", help="only this error group (fingerprint)")
        parser.add_argument("--since", type=parse_time, help="evicted at or after (ISO, UTC unless an offset)")
        parser.add_argument("--until", type=parse_time, help="evicted before (ISO)")
        parser.add_argument("--yes", action="store_true", help="publish them (without it: only list)")

    def handle(self, *args, topic, ids, fp, since, until, yes, **options):
        try:
            rows = archive.find_evicted(topic, ids=ids, fingerprint=fp,
                                        since_ms=int(since.timestamp() * 1000) if since else None,
                                        until_ms=int(until.timestamp() * 1000) if until else None)
        except archive.ArchiveUnavailable as exc:
            raise CommandError(str(exc)) from exc
        if ids:
            missing = sorted(set(ids) - {r["msg"] for r in rows})
            if missing:
                self.stderr.write(self.style.WARNING(f"not in the archive as evicted: {', '.join(missing)}"))
        if not rows:
            raise CommandError(f"no evicted messages of {topic} match in {archive.archive_dir()}")
        for r in rows:
            self.stdout.write(f"{r['msg']}  evicted ({r['reason']})  group {r['fp']}  {len(r['payload'] or b'')} bytes")
        if not yes:
            self.stdout.write(f"{len(rows)} message(s) match; run again with --yes to publish them.")
            return
        done = archive.restore(topic, rows)
        for old, new in done:
            self.stdout.write(f"{old} -> {new}")
        self.stdout.write(self.style.SUCCESS(f"restored {len(done)} message(s) to {topic} (ready now)"))
