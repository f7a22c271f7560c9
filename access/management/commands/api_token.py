"""People's API tokens for scripts.

manage.py api_token create <user> [--label "nightly report"]   # prints the token once
manage.py api_token revoke <user> [--prefix 1a2b3c4d5e6f]      # every active token, or one
manage.py api_token list <user>
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from access.models import ApiToken
from access.services import api_token_create, api_token_revoke
from audit.actor import Actor
from ckptfleet.errors import DomainError


class Command(BaseCommand):
    help = "Create, revoke or list a person's API tokens (tokens are stored hashed and shown once)."

    def add_arguments(self, parser):
        parser.add_argument("verb", choices=["create", "revoke", "list"])
        parser.add_argument("username")
        parser.add_argument("--label", default="", help="What the token is for (create).")
        parser.add_argument("--prefix", default="", help="Revoke only this token (its public prefix).")

    def handle(self, *args, verb, username, label, prefix, **options):
        try:
            user = get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            known = list(get_user_model().objects.order_by("username").values_list("username", flat=True)[:6])
            hint = f" (people: {', '.join(known[:5])}{', ...' if len(known) > 5 else ''})" if known else " (none yet)"
            raise CommandError(f"no user named {username!r}{hint}") from None
        actor = Actor.command(label="manage.py api_token")
        try:
            if verb == "create":
                token, raw = api_token_create(user=user, label=label, actor=actor)
                self.stderr.write(f"API token {token.prefix} for {username}; it is shown only now, keep it secret:")
                self.stdout.write(raw)
            elif verb == "revoke":
                revoked = api_token_revoke(user=user, prefix=prefix, actor=actor)
                self.stdout.write(f"revoked {revoked} token{'s' if revoked != 1 else ''} of {username}")
            else:
                for token in ApiToken.objects.filter(user=user):
                    state = f"revoked {token.revoked_at:%Y-%m-%d %H:%M}" if token.revoked_at else "active"
                    used = f"{token.last_used_at:%Y-%m-%d %H:%M}" if token.last_used_at else "never"
                    self.stdout.write(f"{token.prefix}  {state:<24} last used {used}  {token.label}")
        except DomainError as exc:
            raise CommandError(exc.message) from None
