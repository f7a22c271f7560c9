"""API views of the fleet: inventory upload for agents, read-only lists for people."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.parsers import BaseParser
from rest_framework.response import Response
from rest_framework.views import APIView

from access.roles import Role, require_role
from actions.softdelete import agent_pending, agent_report
from audit.actor import Actor
from audit.choices import EventSource
from ckptfleet.api_fields import AsciiIntegerField
from ckptfleet.errors import DomainError, PermissionRefused, TooLarge
from dashboard import api_examples
from dashboard.api.fleet_serializers import (
    AgentOffloadListSerializer,
    AgentOffloadReportSerializer,
    AgentOffloadSignSerializer,
    AgentPullListSerializer,
    AgentPullReportSerializer,
    HostSerializer,
    InventorySerializer,
    StorageLocationSerializer,
)
from fleet.api.auth import HostPrincipal, HostTokenAuthentication
from fleet.models import Host, Inventory, StorageLocation
from fleet.services import host_gpus_set, host_mark_down, host_mark_up, inventory_receive, location_set_soft_delete
from ingest.scan import scan_start
from promotion import pushes
from promotion.pulls import pending, report

# What an upload and a scan answer (202): the new inventory's id and state, and where to follow it.
INVENTORY_RECEIVED = inline_serializer(
    "InventoryReceived",
    fields={
        "id": AsciiIntegerField(),
        "status": serializers.CharField(help_text="received, applied or failed (an inventory's status)."),
        "url": serializers.CharField(help_text="The inventory's own URL: GET it until it is applied or failed."),
    },
)


class StreamParser(BaseParser):
    """Leaves the body unread, so the view can stream it to disk without holding it in memory."""

    media_type = "application/x-ndjson"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream


class IsHost(permissions.BasePermission):
    message = "only a host agent's token may upload inventories"

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, HostPrincipal)


class InventoryUploadView(APIView):
    """POST: a host agent uploads one gzip NDJSON inventory (docs/wire-format.md)."""

    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsHost]
    parser_classes = [StreamParser]
    # The body is read in chunks against CKPTFLEET_INVENTORY_MAX_BYTES, not the 10 MB of other requests.
    streams_request_body = True

    @extend_schema(
        request={"application/x-ndjson": bytes},
        responses={
            202: INVENTORY_RECEIVED,
            400: OpenApiResponse(description="malformed header"),
            403: OpenApiResponse(description="token of another host"),
            413: OpenApiResponse(),
        },
        examples=api_examples.INVENTORY_UPLOAD,
    )
    def post(self, request):
        """Upload an inventory of one root (gzip NDJSON); applied by a task, polled at the returned URL."""
        declared = request.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > settings.INVENTORY_MAX_BYTES:
            raise TooLarge(
                f"the inventory is {int(declared)} bytes compressed, over the limit of "
                f"{settings.INVENTORY_MAX_BYTES} (CKPTFLEET_INVENTORY_MAX_BYTES)"
            )
        inventory = inventory_receive(
            host=request.user.host,
            stream=request._request,  # the WSGI stream, read in chunks
            content_encoding=request.headers.get("Content-Encoding", ""),
        )
        body = {"id": inventory.pk, "status": inventory.status, "url": f"/api/v1/inventories/{inventory.pk}/"}
        inventory.refresh_from_db(fields=["status"])
        body["status"] = inventory.status
        return Response(body, status=status.HTTP_202_ACCEPTED)


class InventoryDetailView(APIView):
    """GET: the state of one inventory. A host sees its own; a signed-in person sees any."""

    authentication_classes = [HostTokenAuthentication, *APIView.authentication_classes]

    @extend_schema(responses=InventorySerializer)
    def get(self, request, pk: int):
        """The state of one inventory: received, applied or failed, and why."""
        inventory = get_object_or_404(Inventory.objects.select_related("location", "host"), pk=pk)
        if isinstance(request.user, HostPrincipal) and inventory.host_id != request.user.host.pk:
            raise PermissionRefused("this inventory belongs to another host")
        return Response(InventorySerializer(inventory).data)


class InventoryViewSet(viewsets.ReadOnlyModelViewSet):
    """Inventories, newest first."""

    queryset = Inventory.objects.select_related("location", "host")
    serializer_class = InventorySerializer
    filterset_fields = ["status", "location", "host", "source"]


class HostViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Host.objects.prefetch_related("locations__host")
    serializer_class = HostSerializer

    def _mark(self, request, service):
        host = self.get_object()
        data = request.data if isinstance(request.data, dict) else {}
        reason = data.get("reason", "")
        if not isinstance(reason, str):
            raise DomainError('send {"reason": "..."}')
        host = service(host=host, reason=reason, actor=Actor.person(request.user, EventSource.API))
        return Response(HostSerializer(host).data)

    @extend_schema(
        summary="Mark a host down",
        request=None,
        responses={200: HostSerializer, 400: OpenApiResponse(description="no reason"), 403: OpenApiResponse()},
        examples=api_examples.HOST_DOWN,
    )
    @action(detail=True, methods=["post"])
    def down(self, request, pk=None):
        """POST ``{"reason": "..."}`` (operator role): its copies leave the restore ranking until it is marked up."""
        return self._mark(request, host_mark_down)

    @extend_schema(
        summary="Mark a host up again",
        request=None,
        responses={200: HostSerializer},
        examples=api_examples.HOST_UP,
    )
    @action(detail=True, methods=["post"])
    def up(self, request, pk=None):
        """POST ``{"reason": "..."}`` (operator role): its copies are ranked again."""
        return self._mark(request, host_mark_up)

    @extend_schema(
        summary="Set the GPUs a host has",
        request=None,
        responses={200: HostSerializer, 400: OpenApiResponse(description="not a GPU count"), 403: OpenApiResponse()},
        examples=api_examples.HOST_GPUS,
    )
    @action(detail=True, methods=["post"])
    def gpus(self, request, pk=None):
        """POST ``{"gpus": 8}`` (operator role; ``null`` clears it): a run's GPU count when neither an operator,
        its sidecar nor its checkpoints' world size says. Audited as ``host.gpus``."""
        host = self.get_object()
        data = request.data if isinstance(request.data, dict) else None
        if data is None or "gpus" not in data:
            raise DomainError('send {"gpus": N} (a whole number from 0 to 4,096, or null to clear it)')
        host = host_gpus_set(
            host=host,
            gpus=data["gpus"],
            actor=Actor.person(request.user, EventSource.API),
            request_id=getattr(request, "request_id", ""),
        )
        return Response(HostSerializer(host).data)


class StorageLocationViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = StorageLocation.objects.select_related("host")
    serializer_class = StorageLocationSerializer
    filterset_fields = ["kind", "tier", "host"]

    @extend_schema(
        summary="Scan a bucket now (operator role)",
        request=None,
        responses={
            202: INVENTORY_RECEIVED,
            400: OpenApiResponse(description="not a bucket"),
            409: OpenApiResponse(description="a scan of this bucket is already running"),
        },
        examples=api_examples.LOCATION_SCAN,
    )
    @action(detail=True, methods=["post"])
    def scan(self, request, pk=None):
        """POST: scan this bucket now. Answers 202 with the scan's inventory URL to poll."""
        location = self.get_object()
        user = request.user
        require_role(
            user, Role.OPERATOR, doing=f"Scanning {location.name}", target_type="location", target_id=location.pk
        )
        actor = Actor.person(user, EventSource.API)
        inventory = scan_start(location=location, actor=actor)
        inventory.refresh_from_db(fields=["status"])  # without a worker it has run by now
        body = {"id": inventory.pk, "status": inventory.status, "url": f"/api/v1/inventories/{inventory.pk}/"}
        return Response(body, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="Set how many days deletions at a location stay recoverable in the trash (admin role)",
        request=None,
        responses={
            200: StorageLocationSerializer,
            202: OpenApiResponse(description="a shortening, filed as a change request for a second person"),
            400: OpenApiResponse(description="bad days or no reason"),
            403: OpenApiResponse(description="not an admin, or 0 under CKPTFLEET_SOFT_DELETE_REQUIRED"),
        },
        examples=api_examples.LOCATION_SOFT_DELETE,
    )
    @action(detail=True, methods=["post"], url_path="soft-delete")
    def soft_delete(self, request, pk=None):
        """POST ``{"days": 14 | 0 | null, "reason": "..."}``: how many days deletions here stay recoverable in
        the trash (null: the default). An admin's change, audited ("location.soft_delete")."""
        location = self.get_object()
        data = request.data if isinstance(request.data, dict) else {}
        if "days" not in data:
            raise DomainError('send {"days": <whole days, 0, or null for the default>, "reason": "..."}')
        done = location_set_soft_delete(
            location=location,
            days=data["days"],
            reason=data.get("reason", ""),
            actor=Actor.person(request.user, EventSource.API),
        )
        if not isinstance(done, StorageLocation):  # shortening it waits for a second person
            return Response(
                {
                    "change_request": done.pk,
                    "state": done.state,
                    "detail": "shortening the recovery window needs a second person's approval: see /approvals/",
                },
                status=202,
            )
        return Response(StorageLocationSerializer(done).data)


class IsDeletingHost(IsHost):
    message = "only a host agent's token may fetch or report its deletions"


class AgentDeletionsView(APIView):
    """A host agent's deletions: GET its pending files (its own roots only), POST what it did with them.

    GET ``?root=/abs/root`` narrows to one root; ``&can=trash`` says the agent moves files to the trash,
    purges and restores them (items then carry ``action`` trash|purge|restore and ``trash_path``; without it
    files of a location with a recovery window are not listed). Each listed job was checked against the
    promises under its locks just now (``actions.softdelete.agent_pending``). POST
    ``{"results": [{"id": 1, "result": "deleted|trashed|purged|restored|skipped|failed", "detail": "..."}]}``;
    an item of another host refuses the whole report.
    """

    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsDeletingHost]

    @extend_schema(
        summary="Files this host's agent should delete, trash, purge or restore",
        parameters=[
            OpenApiParameter("root", str, description="Only this registered root (an absolute path)."),
            OpenApiParameter("can", str, description="`trash`: the agent moves files to the trash and back."),
        ],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description="pending files"), 403: OpenApiResponse()},
        examples=api_examples.AGENT_DELETIONS,
    )
    def get(self, request):

        root = request.query_params.get("root", "")
        # An agent that can move files to the trash says so; an older one is never sent files it would delete.
        soft = "trash" in request.query_params.get("can", "").split(",")
        items = agent_pending(host=request.user.host, root=root, soft=soft)
        return Response({"host": request.user.host.name, "items": items})

    @extend_schema(
        summary="Report what this host's agent did with its deletions",
        request=None,
        responses={
            200: OpenApiResponse(OpenApiTypes.OBJECT, description="recorded"),
            400: OpenApiResponse(),
            403: OpenApiResponse(),
        },
        examples=api_examples.AGENT_DELETIONS_REPORT,
    )
    def post(self, request):

        results = request.data.get("results") if isinstance(request.data, dict) else None
        counts = agent_report(host=request.user.host, results=results)
        return Response(counts)


class IsPullingHost(IsHost):
    message = "only a host agent's token may fetch or report the files it was asked to pull"


class AgentPromotionsView(APIView):
    """A host agent's promotion pulls: GET the files it should fetch (its own roots only), POST what it did.

    GET ``?root=/abs/root`` narrows to one root; each file comes with a presigned GET URL valid for
    ``expires_in`` seconds (``PROMOTION_PRESIGN_SECONDS``), its size, ETag, sha256 (when known) and
    target path. POST ``{"results": [{"id": 1, "result": "pulled|skipped|failed", "detail": "...",
    "size": 123, "sha256": "..."}]}``; an item of another host refuses the whole report
    (``promotion.pulls``).
    """

    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsPullingHost]

    @extend_schema(
        summary="Files this host's agent should pull from a bucket",
        parameters=[OpenApiParameter("root", str, description="Only this registered root (an absolute path).")],
        examples=api_examples.AGENT_PULLS,
        responses={
            200: AgentPullListSerializer,
            400: OpenApiResponse(description="unknown root"),
            403: OpenApiResponse(),
        },
    )
    def get(self, request):

        return Response(pending(host=request.user.host, root=request.query_params.get("root", "")))

    @extend_schema(
        summary="Report what this host's agent pulled",
        request=AgentPullReportSerializer,
        examples=api_examples.AGENT_PULLS_REPORT,
        responses={200: OpenApiResponse(description="recorded"), 400: OpenApiResponse(), 403: OpenApiResponse()},
    )
    def post(self, request):

        results = request.data.get("results") if isinstance(request.data, dict) else None
        return Response(report(host=request.user.host, results=results))


class IsPushingHost(IsHost):
    message = "only a host agent's token may fetch or report the files it was asked to upload"


class AgentOffloadsView(APIView):
    """A host agent's offloads: GET the files it should upload (its own roots only), POST what it did.

    GET ``?root=/abs/root`` narrows to one root (``&after=<id>``: the next page; ``&dry_run=1``: list only,
    nothing signed or started);
    ``&defer=sha256``: a single-PUT file with no sha256 on record comes unsigned, with ``"sign": "sha256"``,
    for the agent to measure and have signed (``agent/offloads/sign/``);
    each file comes with a presigned PUT URL and the headers signed into it, or, above
    ``OFFLOAD_MULTIPART_THRESHOLD``, the parts of a multipart upload the server started, each with a
    presigned URL (and the ETag of a part the store holds already). POST ``{"results": [{"id": 1,
    "result": "uploaded|skipped|failed", "detail": "...", "size": 123, "sha256": "...", "md5": "...",
    "parts": [{"n": 1, "etag": "..."}]}]}``; an item of another host refuses the whole report
    (``promotion.pushes``).
    """

    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsPushingHost]

    @extend_schema(
        summary="Files this host's agent should upload to a bucket",
        parameters=[
            OpenApiParameter("root", str, description="Only this registered root (an absolute path)."),
            OpenApiParameter("after", int, description="The next page: items after this id."),
            OpenApiParameter("dry_run", bool, description="List only: nothing signed or started."),
            OpenApiParameter("defer", str, enum=["sha256"], description="Leave files with no sha256 unsigned."),
        ],
        examples=api_examples.AGENT_OFFLOADS,
        responses={
            200: AgentOffloadListSerializer,
            400: OpenApiResponse(description="unknown root"),
            403: OpenApiResponse(),
        },
    )
    def get(self, request):
        dry = request.query_params.get("dry_run", "") in ("1", "true")
        after = request.query_params.get("after", "0")
        if not after.isdigit():
            raise DomainError("after must be an item id (a whole number)", code="bad_after")
        root = request.query_params.get("root", "")
        defer = request.query_params.get("defer", "") == "sha256"
        return Response(
            pushes.pending(host=request.user.host, root=root, after=int(after), sign=not dry, defer_unknown=defer)
        )

    @extend_schema(
        summary="Report what this host's agent uploaded",
        request=AgentOffloadReportSerializer,
        examples=api_examples.AGENT_OFFLOADS_REPORT,
        responses={200: OpenApiResponse(description="recorded"), 400: OpenApiResponse(), 403: OpenApiResponse()},
    )
    def post(self, request):
        results = request.data.get("results") if isinstance(request.data, dict) else None
        return Response(pushes.report(host=request.user.host, results=results))


class AgentOffloadSignView(APIView):
    """A host agent's measured files: POST ``{"sign": [{"id": 1, "sha256": "<hex>"}]}``, get presigned PUTs
    whose signed x-amz-checksum-sha256 makes the store check those bytes and keep the checksum
    (``promotion.pushes.sign``); an item of another host refuses the whole request."""

    authentication_classes = [HostTokenAuthentication]
    permission_classes = [IsPushingHost]

    @extend_schema(
        summary="Sign this host's uploads with the sha256 its agent measured",
        request=AgentOffloadSignSerializer,
        examples=api_examples.AGENT_OFFLOADS_SIGN,
        responses={200: AgentOffloadListSerializer, 400: OpenApiResponse(), 403: OpenApiResponse()},
    )
    def post(self, request):
        claims = request.data.get("sign") if isinstance(request.data, dict) else None
        return Response(pushes.sign(host=request.user.host, claims=claims))
