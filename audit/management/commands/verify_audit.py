"""Walk the audit chain and name the first broken link.

manage.py verify_audit        # exit 0 when intact, 1 with the first broken event otherwise
"""

from django.core.management.base import BaseCommand, CommandError

from audit.services import audit_verify


class Command(BaseCommand):
    help = "Check that no audit event was edited, removed or inserted out of order."

    def handle(self, *args, **options):
        checked, broken, why = audit_verify()
        if why:
            where = f"event {broken.pk} ({broken})" if broken else "the end of the chain"
            raise CommandError(f"audit chain broken at {where}: {why}; {checked} events before it are intact")
        self.stdout.write(f"audit chain intact: {checked} events")
