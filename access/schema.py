"""How the API schema describes people's tokens (drf-spectacular finds extensions once this is imported)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "access.authentication.ApiTokenAuthentication"
    name = "personalToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A person's API token (cfu_...), from `manage.py api_token create <user>`.",
        }
