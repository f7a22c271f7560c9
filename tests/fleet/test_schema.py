"""The API schema describes the host agents' token, so drf-spectacular resolves every authenticator."""

from __future__ import annotations

from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator


def test_the_agent_endpoints_require_the_host_token_scheme(monkeypatch):
    said: list[str] = []
    monkeypatch.setattr(GENERATOR_STATS, "emit", lambda msg, severity: said.append(f"{severity}: {msg}"))
    schema = SchemaGenerator().get_schema(request=None, public=True)
    assert [line for line in said if "authenticator" in line] == []
    scheme = schema["components"]["securitySchemes"]["hostToken"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path in (
        "/api/v1/inventories/",
        "/api/v1/agent/deletions/",
        "/api/v1/agent/promotions/",
        "/api/v1/agent/offloads/",
    ):
        for operation in schema["paths"][path].values():
            assert {"hostToken": []} in operation["security"], path
