from django.core.management.base import BaseCommand

from dashboard import roles


class Command(BaseCommand):
    help = ("Create delayq's role groups (names from DELAYQ_ROLE_NAMES) and give them their permissions. "
            "Groups delayq did not create are never changed. --remove deletes the groups delayq created.")

    def add_arguments(self, parser):
        parser.add_argument("--remove", action="store_true", help="delete the groups delayq created (only those)")

    def handle(self, *args, remove: bool, **options):
        outcomes = roles.remove_roles() if remove else roles.ensure_roles()
        for o in outcomes:
            style = self.style.WARNING if o.status == "skipped" else self.style.SUCCESS
            line = f"{o.role}: group {o.group!r} {o.status}"
            self.stdout.write(style(line + (f": {o.detail}" if o.detail else "")))
        if not outcomes:
            self.stdout.write("no groups created by delayq")
