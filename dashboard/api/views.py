"""Read-only API of the catalog."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_view,
)
from rest_framework import generics, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import BasePagination, PageNumberPagination
from rest_framework.response import Response

from access.scoping import restrict_runs, restrict_teams, visible_orphans
from catalog import selectors
from catalog.ladder import ladder_for, resume_answer
from catalog.models import Checkpoint, CheckpointCopy, Run, Team
from ckptfleet.errors import DomainError
from ckptfleet.params import optional_id, whole_number
from dashboard import api_examples
from dashboard.api.serializers import (
    CheckpointPlacementSerializer,
    CheckpointSerializer,
    FlagCountSerializer,
    FlaggedCheckpointSerializer,
    FlaggedPageSerializer,
    OrphanGroupSerializer,
    RunPlacementSerializer,
    RunSerializer,
)
from dashboard.run_filters import SORTS, BadCursor, Place, RunFilters
from fleet.choices import Tier
from spend import placement

PLACEMENT_PAGE = 50
PLACEMENT_PAGE_MAX = 200


def _limit(request, default: int, maximum: int) -> int:
    raw = request.query_params.get("limit")
    if raw is None or raw == "":
        return default
    return whole_number(raw, "limit", minimum=1, maximum=maximum)


class RunKeysetPagination(BasePagination):
    """The runs list's keyset pages, the same as the page's (``RunFilters.page``): ``next`` and ``previous``
    carry a ``cursor`` (the sort, the sort key and id of a run, the direction); ``page_size`` 1 to 1000."""

    page_size = 100
    max_page_size = 1000

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        filters = RunFilters.from_params(request.query_params, team_by_name=True)
        refusal = filters.team_refusal(restrict_teams(Team.objects.all(), request.user))
        if refusal is not None:  # another team's id, for a person scoped to theirs: not found (as on the page)
            raise refusal
        try:
            cursor = filters.cursor(request.query_params.get("cursor"))
        except BadCursor as exc:
            raise DomainError(
                f"cursor must come from `next` or `previous` of this sort: {exc}", code="bad_cursor"
            ) from None
        size = request.query_params.get("page_size") or ""
        size = min(whole_number(size, "page_size", minimum=1), self.max_page_size) if size else self.page_size
        self.page = filters.page(queryset, cursor=cursor, size=size)
        return self.page.runs

    def _link(self, cursor) -> str | None:
        if cursor is None:
            return None
        query = self.request.query_params.copy()
        query["cursor"] = cursor.encode()
        return self.request.build_absolute_uri(f"{self.request.path}?{query.urlencode()}")

    def get_paginated_response(self, data):
        return Response(
            {
                "count": self.page.count,
                "next": self._link(self.page.next),
                "previous": self._link(self.page.previous),
                "results": data,
            }
        )

    def get_paginated_response_schema(self, schema):
        link = {"type": "string", "nullable": True, "format": "uri"}
        next_example = (
            "https://fleet.example.com/api/v1/runs/?team=llm&cursor=eyJzIjoidGVhbSIsImsiOlsibGxtIl0sImlkIjo3fQ"
        )
        return {
            "type": "object",
            "required": ["count", "results"],
            "properties": {
                "count": {"type": "integer", "description": "Runs matching the filters.", "example": 128},
                "next": {**link, "example": next_example},
                "previous": {**link, "example": None},
                "results": schema,
            },
        }

    def get_schema_operation_parameters(self, view):
        return [
            {
                "name": "cursor",
                "required": False,
                "in": "query",
                "description": "From `next` or `previous`: a place in the list under its sort.",
                "schema": {"type": "string"},
            },
            {
                "name": "page_size",
                "required": False,
                "in": "query",
                "description": f"Runs per page, 1 to {self.max_page_size} (default {self.page_size}).",
                "schema": {"type": "integer"},
            },
        ]


def _flag_counts(counts: dict[str, int]) -> list[dict]:
    return [
        {"flag": f, "label": placement.flag_label(f), "help": placement.flag_help(f), "count": n}
        for f, n in counts.items()
    ]


# Where the bytes are (``dashboard.run_filters.Place``): each met by the same present copy.
PLACE_PARAMETERS = [
    OpenApiParameter("tier", str, enum=Tier.values, description="With a present copy holding bytes on this tier."),
    OpenApiParameter("host", int, description="With a present copy on this host (its id)."),
    OpenApiParameter("location", int, description="With a present copy at this storage location (its id)."),
    OpenApiParameter("bucket", str, description="With a present copy in this bucket (its name, any prefix)."),
    OpenApiParameter("storage_class", str, description="With present bytes in this storage class, e.g. GLACIER."),
]


@extend_schema_view(
    list=extend_schema(
        parameters=[
            OpenApiParameter("q", str, description="Part of a run or team name."),
            OpenApiParameter("team", str, description="A team's id or name (`llm`); an unknown one is a 404."),
            *PLACE_PARAMETERS,
            OpenApiParameter(
                "flag", str, enum=placement.Flag.values, description="Runs with a checkpoint raising this flag."
            ),
            OpenApiParameter("attention", bool, description="Runs with a partial or corrupt present copy."),
            OpenApiParameter("sort", str, enum=list(SORTS), description="The order of the list (default team)."),
        ],
        examples=api_examples.RUN_LIST,
    ),
    retrieve=extend_schema(examples=api_examples.RUN_READ),
)
class RunViewSet(viewsets.ReadOnlyModelViewSet):
    """Training runs with checkpoint counts, bytes and their newest step; the runs page's filters, sorts and
    keyset pages apply."""

    serializer_class = RunSerializer
    pagination_class = RunKeysetPagination
    filterset_fields = ["team__name", "status"]

    def get_queryset(self):
        if self.action == "list":
            # Plain runs: the pagination narrows and sorts them, then counts up the page's runs only.
            return restrict_runs(Run.objects.all(), self.request.user)
        return restrict_runs(selectors.run_list(), self.request.user)

    @extend_schema(
        parameters=[
            OpenApiParameter("after", str, description="Cursor from `next`: a step, or `tag:<tag>`."),
            OpenApiParameter("limit", int, description=f"Checkpoints per page, 1 to {PLACEMENT_PAGE_MAX}."),
        ],
        responses={200: RunPlacementSerializer},
    )
    @action(
        detail=True,
        methods=["get"],
        url_path="placement",
        url_name="placement",
        pagination_class=None,
        filter_backends=[],
    )
    def placement_detail(self, request, pk=None):
        """The run's checkpoints (newest step first, keyset-paged) against the locations holding its copies,
        each copy's state, verification and tiers; and the run's placement flags with their counts."""
        run = get_object_or_404(restrict_runs(Run.objects.all(), request.user), pk=pk)
        limit = _limit(request, PLACEMENT_PAGE, PLACEMENT_PAGE_MAX)
        try:
            checkpoints, after = placement.run_checkpoints_after(
                run.pk, after=request.query_params.get("after"), limit=limit
            )
        except ValueError:
            raise DomainError("after must be a cursor from `next`: a step, or tag:<tag>", code="bad_cursor") from None
        # As on the run page: left-overs of interrupted saves are neither checkpoints nor copies here.
        for checkpoint in checkpoints:
            checkpoint.present = [c for c in checkpoint.present if not c.temporary]
        checkpoints = [c for c in checkpoints if c.present]
        columns = placement.run_columns(run.pk)
        summaries, flags = placement.run_flags(run.pk, shown=0)
        rows = placement.matrix_rows(checkpoints, columns, flags=flags)
        next_url = None
        if after is not None:
            query = request.query_params.copy()
            query["after"] = after
            next_url = request.build_absolute_uri(f"{request.path}?{query.urlencode()}")
        data = {
            "columns": columns,
            "rows": rows,
            "flags": _flag_counts({f.flag: f.count for f in summaries}),
            "next": next_url,
        }
        return Response(RunPlacementSerializer(data).data)

    @extend_schema(
        summary="Where a restarting job should resume from",
        description=(
            "The checkpoint to resume from, its fastest reachable copy and path, the commands to fetch it, the "
            "framework's pointer at that location with its fix, the layout it was saved with, and the rest of the "
            "fallback ladder. Read-only; the viewer role is enough."
        ),
        responses={200: dict},
        examples=api_examples.RUN_RESUME,
    )
    @action(
        detail=True, methods=["get"], url_path="resume", url_name="resume", pagination_class=None, filter_backends=[]
    )
    def resume(self, request, pk=None):
        """One answer for a restarting job: what to load, from where, and what to fix first."""
        run = get_object_or_404(restrict_runs(Run.objects.select_related("team"), request.user), pk=pk)
        return Response(resume_answer(run))

    @extend_schema(summary="The run's fallback ladder", responses={200: dict})
    @action(
        detail=True, methods=["get"], url_path="ladder", url_name="ladder", pagination_class=None, filter_backends=[]
    )
    def ladder(self, request, pk=None):
        """Every recent checkpoint in the order to try it, with its copies, restore time, the training it would
        throw away, and why it ranks where it does; the ones that cannot be resumed from come last with the reason."""
        run = get_object_or_404(restrict_runs(Run.objects.select_related("team"), request.user), pk=pk)
        return Response({"run": run.pk, "ladder": [r.as_dict() for r in ladder_for(run)]})


@extend_schema_view(list=extend_schema(parameters=PLACE_PARAMETERS))
class CheckpointViewSet(viewsets.ReadOnlyModelViewSet):
    """Checkpoints with every present copy, its state and the reasons."""

    serializer_class = CheckpointSerializer
    filterset_fields = ["run", "importance", "step"]

    def get_queryset(self):
        # Left-overs of interrupted saves are orphans (/api/v1/orphans/), not copies, and a checkpoint that has
        # nothing else is not listed.
        copies = (
            selectors.present_copies(temporary=False)
            .select_related("location", "location__host")
            .prefetch_related("tier_usage")
        )
        checkpoints = restrict_runs(Checkpoint.objects.all(), self.request.user, run_path="run__")
        leftover = CheckpointCopy.objects.filter(checkpoint=OuterRef("pk"), temporary=True)
        kept = CheckpointCopy.objects.filter(checkpoint=OuterRef("pk"), temporary=False)
        checkpoints = checkpoints.exclude(Exists(leftover) & ~Exists(kept))
        place = Place.from_params(self.request.query_params)
        if self.action == "list" and place:
            # Checkpoints with a present copy holding bytes there (the runs list's place filters).
            checkpoints = checkpoints.filter(pk__in=place.usage().values("copy__checkpoint_id"))
        return checkpoints.select_related("run__team").prefetch_related(
            Prefetch("copies", queryset=copies, to_attr="present")
        )

    @extend_schema(responses={200: CheckpointPlacementSerializer})
    @action(
        detail=True,
        methods=["get"],
        url_path="placement",
        url_name="placement",
        pagination_class=None,
        filter_backends=[],
    )
    def placement_detail(self, request, pk=None):
        """Where the checkpoint's present copies are (tiers, host, site, region, failure domain), and its flags."""
        checkpoint = self.get_object()
        result = placement.checkpoint_placement(checkpoint, checkpoint.present)
        data = {
            "checkpoint_id": checkpoint.pk,
            "verified_copies": len(result.verified),
            "failure_domains": result.domains,
            "flags": _flag_counts({f: 1 for f in result.flags}),
            "copies": result.copies,
        }
        return Response(CheckpointPlacementSerializer(data).data)

    @extend_schema(
        summary="Placement flags with their counts, or the checkpoints raising one flag",
        operation_id="checkpoints_flagged_list",
        examples=api_examples.CHECKPOINTS_FLAGGED,
        parameters=[
            OpenApiParameter("flag", str, enum=placement.Flag.values, description="List the checkpoints of one flag."),
            OpenApiParameter("run", int, description="Only this run (its id)."),
        ],
        # Two shapes, as the description says: without ``flag`` the list of flags with their counts, with it a
        # cursor page of checkpoints (declared as it is, so the schema generator does not page the list again).
        responses={
            200: PolymorphicProxySerializer(
                component_name="FlaggedAnswer",
                serializers=[FlagCountSerializer(many=True), FlaggedPageSerializer()],
                resource_type_field_name=None,
                many=False,
            )
        },
    )
    @action(detail=False, methods=["get"], url_path="flagged", filter_backends=[])
    def flagged(self, request):
        """Without ``flag``: every placement flag with its help and count. With it: the flagged checkpoints,
        cursor-paged, each with why."""
        run_id = optional_id(request.query_params.get("run"), "run")
        flag = request.query_params.get("flag") or None

        def scoped(name):
            return restrict_runs(placement.flagged(name, run_id=run_id), request.user, run_path="run__")

        if flag is None:
            counts = {f: scoped(f).count() for f in placement.Flag.values}
            return Response(FlagCountSerializer(_flag_counts(counts), many=True).data)
        if flag not in placement.Flag.values:
            raise ValidationError({"flag": f"one of {', '.join(placement.Flag.values)}"})
        page = self.paginate_queryset(scoped(flag).select_related("run__team"))
        items = placement.explain([(flag, ck) for ck in page])
        data = [{"checkpoint": ck, "flag": f, "why": why} for f, ck, why in items]
        return self.get_paginated_response(FlaggedCheckpointSerializer(data, many=True).data)


class OrphanPagination(PageNumberPagination):
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


@extend_schema(
    parameters=[
        OpenApiParameter("kind", str, enum=selectors.OrphanKind.values, description="Only this kind."),
        OpenApiParameter("location", int, description="Only this storage location (its id)."),
    ]
)
class OrphanListView(generics.ListAPIView):
    """Orphans grouped by kind, location and run directory, with counts, bytes and ages."""

    serializer_class = OrphanGroupSerializer
    pagination_class = OrphanPagination
    filter_backends: list = []

    def get_queryset(self):
        kind = self.request.query_params.get("kind") or None
        if kind is not None and kind not in selectors.OrphanKind.values:
            raise ValidationError({"kind": f"one of {', '.join(selectors.OrphanKind.values)}"})
        location_id = optional_id(self.request.query_params.get("location"), "location")
        groups = selectors.orphans(kind=kind, location_id=location_id)
        return visible_orphans(groups, self.request.user)
