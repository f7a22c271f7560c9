"""How the API schema describes host agents' tokens (drf-spectacular finds extensions once this is imported)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class HostTokenScheme(OpenApiAuthenticationExtension):
    target_class = "fleet.api.auth.HostTokenAuthentication"
    name = "hostToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "A host agent's token (cfh_...), printed once by `manage.py fleet_host add` or `rotate-token`; "
                "it reports inventory for that host alone."
            ),
        }
