"""Unknown query parameters on the API's reads: a 400 that names them and lists the known ones.

A filter nobody reads was silently ignored: ``/api/v1/runs/?team=llm`` answered every run, and a script that
misspelt a filter believed it had filtered. Each GET (and HEAD) of ``/api/v1/`` now accepts exactly the query
parameters its OpenAPI operation declares: the filterset's fields, the paginator's (``cursor``, ``page_size``,
``page``), the ``@extend_schema(parameters=...)`` of the view, and ``format`` (DRF's format override). So the
schema and the check cannot disagree: a parameter a view reads but does not declare is refused here, and the
view's test fails until it is declared (and then the schema, and schemathesis, know it too).

The declared names come from drf-spectacular's own introspection of the view (``AutoSchema._get_parameters``,
the code that writes the operation's ``parameters``), once per view and method. Views the schema leaves out
(the schema and docs views) are not checked.
"""

from __future__ import annotations

from functools import lru_cache

from ckptfleet.middleware import refusal

API_PREFIX = "/api/v1/"
ALWAYS_KNOWN = frozenset({"format"})
_CHECKED_METHODS = frozenset({"GET", "HEAD"})


@lru_cache(maxsize=512)
def declared_query_parameters(callback, method: str) -> frozenset[str] | None:
    """The query parameters the OpenAPI operation of ``callback`` (a DRF view function) declares for
    ``method``; None for a view the schema leaves out, or one that is not DRF's."""
    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.openapi import AutoSchema
    from drf_spectacular.plumbing import ComponentRegistry
    from drf_spectacular.settings import spectacular_settings

    if not hasattr(callback, "cls"):
        return None
    actions = getattr(callback, "actions", None)
    if (method.lower() not in actions) if actions is not None else not hasattr(callback.cls, method.lower()):
        return None  # the view answers 405
    with GENERATOR_STATS.silence():
        generator = SchemaGenerator()  # it keeps the view's schema alive (a weak proxy) until we are done
        view = generator.create_view(callback, method)
        # As the generator does: filtersets read the view's queryset, which reads the request's (anonymous) user.
        view.request = spectacular_settings.GET_MOCK_REQUEST(method, API_PREFIX, view, None)
        schema = getattr(view, "schema", None)
        if not isinstance(schema, AutoSchema) or schema.is_excluded():
            return None
        schema.registry = ComponentRegistry()
        schema.method = method
        schema.path = schema.path_regex = schema.path_prefix = ""
        parameters = schema._get_parameters()
    return ALWAYS_KNOWN | frozenset(p["name"] for p in parameters if p["in"] == "query")


def unknown_parameters_detail(unknown: list[str], known: frozenset[str]) -> str:
    noun = "parameter" if len(unknown) == 1 else "parameters"
    shown = ", ".join(name[:40] for name in unknown[:10])
    return f"Unknown query {noun}: {shown}. Known: {', '.join(sorted(known))}."


class UnknownQueryParameterMiddleware:
    """Refuses a GET or HEAD of the API that carries a query parameter its operation does not declare."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.method not in _CHECKED_METHODS or not request.path_info.startswith(API_PREFIX) or not request.GET:
            return None
        method = "GET"  # HEAD is answered by the GET handler and declares nothing of its own
        known = declared_query_parameters(view_func, method)
        if known is None:
            return None
        unknown = [name for name in request.GET if name not in known]
        if not unknown:
            return None
        return refusal(request, 400, "bad_parameter", unknown_parameters_detail(unknown, known))
