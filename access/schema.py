"""How the API schema describes people's tokens (drf-spectacular finds extensions once this is imported)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "access.authentication.ApiTokenAuthentication"
    name = "personalToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "A person's API token (cfu_...), from the API tokens page (/account/tokens/) or "
                "`manage.py api_token create <user>`; sent as `Authorization: Bearer cfu_...`."
            ),
        }
