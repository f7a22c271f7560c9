"""Write the audit chain's head to every configured anchor store now (beat does it every AUDIT_ANCHOR_MINUTES).

manage.py anchor_audit        # exit 1 when no store is configured or a store refused the anchor
"""

from django.core.management.base import BaseCommand, CommandError

from audit.anchors import anchor_write, configured_stores
from audit.choices import AnchorOutcome


class Command(BaseCommand):
    help = "Write the audit chain head outside the database (a signed file, an Object Lock object) now."

    def handle(self, *args, **options):
        if not configured_stores():
            raise CommandError(
                "no anchor store is configured: set CKPTFLEET_AUDIT_ANCHOR_DIR and/or CKPTFLEET_AUDIT_ANCHOR_S3"
            )
        anchors = anchor_write()
        if not anchors:
            self.stdout.write("nothing to anchor yet: the audit chain has no events")
            return
        for anchor in anchors:
            if anchor.outcome == AnchorOutcome.WRITTEN:
                self.stdout.write(f"anchored event {anchor.count:,} ({anchor.last_hash[:12]}…) in {anchor.location}")
            else:
                self.stderr.write(f"the {anchor.get_target_display()} anchor failed: {anchor.error}")
        if any(anchor.outcome == AnchorOutcome.FAILED for anchor in anchors):
            raise CommandError("an anchor store refused the anchor (above)")
