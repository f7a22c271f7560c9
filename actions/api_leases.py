"""The API of leases (``actions.leases``): a person's, under /api/v1/actions/leases/, and a host agent's, under
/api/v1/agent/leases/ (the host's own token, for checkpoints with a copy at its locations).

    POST /api/v1/actions/leases/  {"checkpoint": 42, "owner": "job-7", "purpose": "resuming", "ttl_seconds": 3600}
    POST /api/v1/actions/leases/<id>/renew/  {"ttl_seconds": 3600}
    POST /api/v1/actions/leases/<id>/release/
    GET  /api/v1/actions/leases/?checkpoint=42&live=true
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from access.scoping import restrict, visible_team_names
from actions import api_examples, leases
from actions.models import Lease, LeasePurpose
from audit.actor import Actor
from catalog.models import Checkpoint
from ckptfleet.api_fields import AsciiIntegerField, FleetModelSerializer
from ckptfleet.errors import DomainError
from ckptfleet.params import parse_id
from fleet.api.auth import HostPrincipal, HostTokenAuthentication


class LeaseSerializer(FleetModelSerializer):
    live = serializers.SerializerMethodField()

    class Meta:
        model = Lease
        fields = [
            "id",
            "checkpoint",
            "owner",
            "purpose",
            "taken_label",
            "taken_at",
            "renewed_at",
            "expires_at",
            "released_at",
            "released_label",
            "lapsed_at",
            "live",
        ]

    def get_live(self, obj: Lease) -> bool:
        return obj.live_at(timezone.now())


class LeaseTakeInput(serializers.Serializer):
    checkpoint = AsciiIntegerField(min_value=1)
    owner = serializers.CharField(max_length=200)
    purpose = serializers.ChoiceField(choices=LeasePurpose.choices)
    ttl_seconds = AsciiIntegerField(help_text="How long it lasts unless renewed, in seconds.")


class LeaseRenewInput(serializers.Serializer):
    ttl_seconds = AsciiIntegerField()


class LeaseReleaseInput(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


def _valid(cls, request) -> dict:
    ser = cls(data=request.data if isinstance(request.data, dict) else {})
    ser.is_valid(raise_exception=True)
    return dict(ser.validated_data)


def _visible_leases(user):
    rows = Lease.objects.select_related("checkpoint__run__team")
    names = visible_team_names(user)
    return rows if names is None else rows.filter(checkpoint__run__team__name__in=names)


def _lease(pk, user) -> Lease:
    found = _visible_leases(user).filter(pk=parse_id(pk, "lease")).first()
    if found is None:
        raise DomainError("no such lease", code="not_found", http_status=404)
    return found


def _checkpoint(pk, user=None) -> Checkpoint:
    rows = Checkpoint.objects.select_related("run__team")
    if user is not None:
        rows = restrict(rows, user)
    found = rows.filter(pk=parse_id(pk, "checkpoint")).first()
    if found is None:
        raise DomainError("no such checkpoint", code="not_found", http_status=404)
    return found


class LeaseListView(APIView):
    """Leases of the checkpoints a person may see; POST takes one (operator role)."""

    @extend_schema(
        summary="List leases",
        parameters=[
            OpenApiParameter("checkpoint", int, description="Only this checkpoint's."),
            OpenApiParameter("live", bool, description="true: only live ones."),
        ],
        responses=LeaseSerializer(many=True),
        examples=api_examples.LEASE,
    )
    def get(self, request):
        rows = _visible_leases(request.user)
        if request.query_params.get("checkpoint"):
            rows = rows.filter(checkpoint_id=parse_id(request.query_params["checkpoint"], "checkpoint"))
        if request.query_params.get("live") in ("true", "1"):
            rows = rows.filter(released_at__isnull=True, expires_at__gt=timezone.now())
        return Response(LeaseSerializer(rows[:500], many=True).data)

    @extend_schema(
        summary="Take a lease",
        request=LeaseTakeInput,
        responses={201: LeaseSerializer},
        examples=api_examples.LEASE_TAKE,
    )
    def post(self, request):
        data = _valid(LeaseTakeInput, request)
        lease = leases.take(
            checkpoint=_checkpoint(data["checkpoint"], request.user),
            owner=data["owner"],
            purpose=data["purpose"],
            ttl_seconds=data["ttl_seconds"],
            actor=Actor.for_request(request),
        )
        return Response(LeaseSerializer(lease).data, status=status.HTTP_201_CREATED)


class LeaseRenewView(APIView):
    """POST moves the lease's expiry to now + ttl_seconds (operator role)."""

    @extend_schema(
        summary="Renew a lease", request=LeaseRenewInput, responses=LeaseSerializer, examples=api_examples.LEASE_RENEW
    )
    def post(self, request, pk):
        data = _valid(LeaseRenewInput, request)
        lease = leases.renew(
            lease=_lease(pk, request.user), ttl_seconds=data["ttl_seconds"], actor=Actor.for_request(request)
        )
        return Response(LeaseSerializer(lease).data)


class LeaseReleaseView(APIView):
    """POST ends the lease now (operator role)."""

    @extend_schema(
        summary="Release a lease",
        request=LeaseReleaseInput,
        responses=LeaseSerializer,
        examples=api_examples.LEASE_RELEASE,
    )
    def post(self, request, pk):
        data = _valid(LeaseReleaseInput, request)
        lease = leases.release(lease=_lease(pk, request.user), actor=Actor.for_request(request), reason=data["reason"])
        return Response(LeaseSerializer(lease).data)


# --- a host's agent ---------------------------------------------------------------------------------


class IsLeasingHost(permissions.BasePermission):
    message = "only a host agent's token may take, renew or release a lease here"

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, HostPrincipal)


def _host_actor(request) -> Actor:
    return Actor.agent(request.user.host.name)


class AgentLeaseView(APIView):
    """A host agent takes a lease on a checkpoint it holds a copy of (POST), or lists the ones it took (GET)."""

    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsLeasingHost]

    @extend_schema(summary="Leases this host took", responses=LeaseSerializer(many=True), examples=api_examples.LEASE)
    def get(self, request):
        rows = Lease.objects.filter(host=request.user.host).order_by("-taken_at")[:200]
        return Response(LeaseSerializer(rows, many=True).data)

    @extend_schema(
        summary="Take a lease as a host",
        request=LeaseTakeInput,
        responses={201: LeaseSerializer},
        examples=api_examples.AGENT_LEASE_TAKE,
    )
    def post(self, request):
        data = _valid(LeaseTakeInput, request)
        lease = leases.take(
            checkpoint=_checkpoint(data["checkpoint"]),
            owner=data["owner"],
            purpose=data["purpose"],
            ttl_seconds=data["ttl_seconds"],
            actor=_host_actor(request),
            host=request.user.host,
        )
        return Response(LeaseSerializer(lease).data, status=status.HTTP_201_CREATED)


class AgentLeaseChangeView(APIView):
    """POST renew/ (``{"ttl_seconds": N}``) or release/ a lease this host took."""

    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsLeasingHost]
    change = "renew"

    @extend_schema(
        summary="Renew or release a lease as a host",
        request=LeaseRenewInput,
        responses=LeaseSerializer,
        examples=api_examples.LEASE_RENEW,
    )
    def post(self, request, pk):
        found = Lease.objects.filter(pk=parse_id(pk, "lease")).first()
        if found is None:
            raise DomainError("no such lease", code="not_found", http_status=404)
        actor, host = _host_actor(request), request.user.host
        if self.change == "renew":
            data = _valid(LeaseRenewInput, request)
            lease = leases.renew(lease=found, ttl_seconds=data["ttl_seconds"], actor=actor, host=host)
        else:
            lease = leases.release(lease=found, actor=actor, host=host)
        return Response(LeaseSerializer(lease).data)
