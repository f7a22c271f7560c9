"""API of spend: the headline numbers of a period, every spend table (JSON or CSV), and the price book.

The tables are the ones the pages show (``spend.report``); ``?format=csv`` exports one.
"""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer, JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from access.roles import Role, require_role
from access.scoping import restrict_runs, spend_team_ids
from audit.actor import Actor
from audit.choices import EventSource
from catalog.models import Run
from ckptfleet.api_fields import AsciiDecimalField, AsciiIntegerField, AsciiPrimaryKeyRelatedField
from ckptfleet.params import optional_id
from fleet.choices import LocationKind, Tier
from fleet.models import Host, PriceBasis, StorageLocation
from fleet.pricebook import utc_today
from spend import api_examples
from spend import report as spend
from spend.prices import price_set

PERIOD_PARAMETERS = [
    OpenApiParameter("month", str, description="The calendar month, YYYY-MM (default: this month, UTC)."),
    OpenApiParameter("day", str, description="One UTC day, YYYY-MM-DD, instead of a month."),
    OpenApiParameter("run", int, description="Only this run (its id)."),
    OpenApiParameter("team", int, description="Only this team (its id)."),
]


class CSVRenderer(BaseRenderer):
    """Renders a spend table as CSV (``?format=csv``); the view hands it the ``Table`` itself."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        table = (renderer_context or {}).get("table")
        if table is None:  # an error answer: say it in one line
            detail = data.get("detail", "") if isinstance(data, dict) else str(data)
            return f"error\r\n{detail}\r\n".encode()
        return spend.table_csv(table).encode("utf-8")


def _int_param(request, name: str) -> int | None:
    return optional_id(request.query_params.get(name), name)


def _basis(request) -> spend.Basis:
    today = utc_today()
    period = spend.Period.parse(
        month=request.query_params.get("month"), day=request.query_params.get("day"), today=today
    )
    scope = spend.Scope(
        run_id=_int_param(request, "run"), team_id=_int_param(request, "team"), team_ids=spend_team_ids(request.user)
    )
    if scope.run_id is not None and scope.team_ids is not None:
        if not restrict_runs(Run.objects.filter(pk=scope.run_id), request.user).exists():
            raise Http404("no such run")
    return spend.basis_for(period, today=today, scope=scope)


class SpendSummaryView(APIView):
    """Spend of a month (or a day): total, last month, change, forecasts, what is stored, and the tables."""

    @extend_schema(operation_id="spend_summary", parameters=PERIOD_PARAMETERS, responses={200: dict})
    def get(self, request):
        basis = _basis(request)
        body = spend.summary_data(spend.summary(basis))
        query = basis.period.param + (f"&{basis.scope.params}" if basis.scope.params else "")
        body["tables"] = {name: request.build_absolute_uri(f"{request.path}{name}/?{query}") for name in spend.TABLES}
        return Response(body)


class SpendTableView(APIView):
    """One spend table by name: columns with their units, rows of exact values, the total. ``?format=csv``."""

    renderer_classes = [JSONRenderer, BrowsableAPIRenderer, CSVRenderer]

    @extend_schema(
        operation_id="spend_table",
        parameters=[
            *PERIOD_PARAMETERS,
            OpenApiParameter("format", str, enum=["json", "csv"], description="csv: download the table."),
        ],
        responses={200: dict},
    )
    def get(self, request, name: str):
        if name not in spend.TABLES:
            raise Http404(f"no spend table {name!r}; the tables are {', '.join(spend.TABLES)}")
        # A read, as the page and the JSON are: any role may download it (one role model for every format).
        table = spend.spend_table(name, _basis(request))
        self.table = table
        response = Response(spend.table_data(table))
        if getattr(request, "accepted_renderer", None) and request.accepted_renderer.format == "csv":
            response["Content-Disposition"] = f'attachment; filename="{spend.csv_filename(table)}"'
        return response

    def get_renderer_context(self):
        context = super().get_renderer_context()
        context["table"] = getattr(self, "table", None)
        return context


class PricePointSerializer(serializers.Serializer):
    """A price point as read, and what a new one needs. Prices are never edited: a change is a new point."""

    id = AsciiIntegerField(read_only=True)
    scope = serializers.CharField(source="scope_label", read_only=True)
    kind = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        help_text=f"Every location of this kind ({', '.join(LocationKind.values)}); empty: of any kind.",
    )
    tier = serializers.ChoiceField(choices=Tier.choices)
    storage_class = serializers.CharField(max_length=32, required=False, allow_blank=True, default="")
    location = AsciiPrimaryKeyRelatedField(
        queryset=StorageLocation.objects.all(), required=False, allow_null=True, default=None
    )
    host = AsciiPrimaryKeyRelatedField(queryset=Host.objects.all(), required=False, allow_null=True, default=None)
    price_per_gib_month = AsciiDecimalField(max_digits=20, decimal_places=12, read_only=True)
    basis = serializers.ChoiceField(choices=PriceBasis.choices, default=PriceBasis.GIB_MONTH)
    price = AsciiDecimalField(
        max_digits=20,
        decimal_places=6,
        write_only=True,
        help_text="In the basis: per GiB-month, per TiB-month, or the monthly cost of a host's drives.",
    )
    entered_price = AsciiDecimalField(max_digits=20, decimal_places=6, read_only=True)
    host_capacity_bytes = AsciiIntegerField(required=False, allow_null=True, default=None, min_value=1)
    currency = serializers.CharField(max_length=3, default="USD")
    effective_from = serializers.DateField()
    source = serializers.CharField(allow_blank=True, required=False, default="")
    created_by = serializers.CharField(read_only=True)
    created_at = serializers.DateTimeField(read_only=True)


class PricePointListView(APIView):
    """The price book: every point, newest first. POST adds one (the finance role)."""

    @extend_schema(responses={200: PricePointSerializer(many=True)})
    def get(self, request):
        """The price book: every price point, by provider, region and storage class."""
        return Response(PricePointSerializer(spend.price_points(), many=True).data)

    @extend_schema(
        request=PricePointSerializer,
        responses={201: PricePointSerializer},
        examples=api_examples.PRICE_POINT_CREATE,
    )
    def post(self, request):
        """Add a price point to the price book (finance role)."""
        require_role(request.user, Role.FINANCE, doing="Adding to the price book", target_type="price_point")
        serializer = PricePointSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        user = request.user
        point = price_set(
            tier=data["tier"],
            price=data["price"],
            basis=data["basis"],
            kind=data["kind"],
            storage_class=data["storage_class"],
            location=data["location"],
            host=data["host"],
            host_capacity_bytes=data["host_capacity_bytes"],
            currency=data["currency"],
            effective_from=data["effective_from"],
            source=data["source"],
            actor=Actor.person(user, EventSource.API),
        )
        return Response(PricePointSerializer(point).data, status=status.HTTP_201_CREATED)
