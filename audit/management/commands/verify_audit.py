"""Walk the audit chain, compare it with every anchor written outside the database, and name each problem.

manage.py verify_audit        # exit 0 when intact, 1 with every problem (the first one first) otherwise

The result is kept like a scheduled run's, so the audit page, /healthz/ and /metrics/ show it too.
"""

from django.core.management.base import BaseCommand, CommandError

from audit.choices import VerificationTrigger
from audit.verify import record_report


class Command(BaseCommand):
    help = "Check that no audit event was edited, removed or inserted, and that the chain agrees with its anchors."

    def handle(self, *args, **options):
        report, _ = record_report(trigger=VerificationTrigger.COMMAND)
        summary = f"{report.events_checked:,} events, {report.anchors_checked:,} anchors checked"
        if report.problems:
            for problem in report.problems[1:]:
                self.stderr.write(f"also: {problem}")
            more = f" (and {len(report.problems) - 1} more, above)" if len(report.problems) > 1 else ""
            raise CommandError(f"audit trail verification failed: {report.problems[0]}{more}; {summary}")
        self.stdout.write(f"audit chain intact: {summary}")
