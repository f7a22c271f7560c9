"""API token authentication for people's scripts: ``Authorization: Bearer cfu_…``."""

from __future__ import annotations

from rest_framework import authentication, exceptions


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """A person's token (the API tokens page, ``/account/tokens/``, or ``manage.py api_token create <user>``);
    host agents' ``cfh_`` tokens are not for it."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        scheme, _, raw = header.partition(" ")
        raw = raw.strip()
        if scheme == self.keyword and raw.startswith("cfh_"):
            raise exceptions.AuthenticationFailed(
                "this is a host agent's token (cfh_), which only the agent endpoints take; "
                "a script uses a person's token (cfu_, from /account/tokens/ or manage.py api_token create <user>)",
                code="not_authenticated",
            )
        if scheme != self.keyword or not raw.startswith("cfu_"):
            return None
        # Imported here: DRF reads this class while ckptfleet.errors, which the services need, is loading.
        from access.services import api_token_authenticate

        return api_token_authenticate(raw)

    def authenticate_header(self, request) -> str:
        return self.keyword
