"""API of the problems list (``dashboard.problems``): the same filters, sort and totals as the page, paginated."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from ckptfleet.api_fields import AsciiDecimalField, AsciiIntegerField
from ckptfleet.params import whole_number
from dashboard import problems

_PROBLEM_FIELDS = {
    "kind": serializers.ChoiceField(choices=problems.Kind.choices),
    "subject": serializers.ChoiceField(choices=["copy", "checkpoint", "orphans"]),
    "subject_label": serializers.CharField(),
    "subject_url": serializers.URLField(),
    "checkpoint": AsciiIntegerField(allow_null=True),
    "copy": AsciiIntegerField(allow_null=True),
    "run": AsciiIntegerField(allow_null=True),
    "run_label": serializers.CharField(),
    "team": serializers.CharField(),
    "location": AsciiIntegerField(allow_null=True),
    "location_name": serializers.CharField(),
    "reasons": serializers.ListField(child=serializers.CharField()),
    "since": serializers.DateTimeField(allow_null=True),
    "age_days": AsciiIntegerField(allow_null=True),
    "bytes": AsciiIntegerField(),
    "cost_per_month": AsciiDecimalField(max_digits=24, decimal_places=4, allow_null=True),
    "action": serializers.CharField(),
    "action_url": serializers.URLField(),
}


def _row(request, p: problems.Problem) -> dict:
    return {
        "kind": p.kind,
        "subject": p.subject,
        "subject_label": p.subject_label,
        "subject_url": request.build_absolute_uri(p.subject_url),
        "checkpoint": p.checkpoint_id,
        "copy": p.copy_id,
        "run": p.run_id,
        "run_label": p.run_label,
        "team": p.team,
        "location": p.location_id,
        "location_name": p.location_name,
        "reasons": p.reasons,
        "since": p.since,
        "age_days": p.age_days,
        "bytes": p.bytes,
        "cost_per_month": None if p.cost is None else f"{p.cost:.4f}",
        "action": p.action_label,
        "action_url": request.build_absolute_uri(p.action_url),
    }


class ProblemListView(APIView):
    """Every problem of the fleet in one list, as the Problems page shows it."""

    @extend_schema(
        summary="Problems: partial, corrupt, disputed, unverified, under-replicated, misplaced and orphaned items",
        description="One list of everything that needs attention, with its reason, since when, bytes, cost per "
        "month at today's prices and the URL of the action that fixes it. Filters take ids or names; a value that "
        "names nothing you may see is a 400. Totals by kind cover every page.",
        parameters=[
            OpenApiParameter("kind", OpenApiTypes.STR, enum=problems.Kind.values),
            OpenApiParameter("team", OpenApiTypes.STR, description="A team's name or id."),
            OpenApiParameter("run", OpenApiTypes.STR, description='A run as "team/run", or its id.'),
            OpenApiParameter("location", OpenApiTypes.STR, description="A storage location's name or id."),
            OpenApiParameter("age", OpenApiTypes.INT, description="Only problems at least this many days old."),
            OpenApiParameter("sort", OpenApiTypes.STR, enum=list(problems.SORTS)),
            OpenApiParameter("page", OpenApiTypes.INT),
            OpenApiParameter("page_size", OpenApiTypes.INT, description=f"At most {problems.MAX_PAGE_SIZE}."),
        ],
        responses=inline_serializer(
            "ProblemPage",
            {
                "count": AsciiIntegerField(),
                "bytes": AsciiIntegerField(),
                "page": AsciiIntegerField(),
                "pages": AsciiIntegerField(),
                "currency": serializers.CharField(),
                "totals": serializers.ListField(child=serializers.DictField()),
                "results": inline_serializer("Problem", _PROBLEM_FIELDS, many=True),
            },
        ),
    )
    def get(self, request):
        params = request.query_params
        filters = problems.filters_from(params, request.user)
        number = whole_number(params.get("page") or "1", "page", minimum=1, maximum=10_000_000)
        size = whole_number(
            params.get("page_size") or str(problems.PAGE_SIZE), "page_size", minimum=1, maximum=problems.MAX_PAGE_SIZE
        )
        page = problems.problem_page(filters, request.user, number=number, size=size)
        return Response(
            {
                "count": page.count,
                "bytes": page.bytes,
                "page": page.number,
                "pages": page.pages,
                "currency": page.currency,
                "totals": [{"kind": t.kind, "label": t.label, "count": t.count, "bytes": t.bytes} for t in page.totals],
                "results": [_row(request, p) for p in page.rows],
            }
        )
