"""API of the dashboard pages: the overview's numbers, a run's recovery answer, and the jobs list.

The same functions build the pages (``dashboard.views_overview``, ``catalog.recovery``, ``dashboard.jobs``),
so a script sees what a person sees.
"""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from access.scoping import restrict_runs
from catalog.models import Run
from catalog.pointers import pointers_for_run
from catalog.recovery_model import recovery_of
from catalog.reshard import layouts_of
from ckptfleet.api_fields import AsciiDecimalField, AsciiIntegerField
from dashboard.jobs import KINDS, STATES, recent_jobs
from dashboard.views_overview import attention_items, overview_basis

JOBS_LIMIT = 200


def _copy(r, layouts: dict) -> dict:
    copy = r.copy
    return {
        "copy": copy.pk,
        "location": copy.location.name,
        "location_id": copy.location_id,
        "host": copy.location.host.name if copy.location.host_id else None,
        "path": copy.path,
        # The layout it was saved with and whether it loads on another GPU count (catalog.reshard).
        "layout": layouts[copy.pk].as_dict(),
        # Not offered as the restore source when its host is marked down or silent; and how fresh the evidence is.
        "unreachable": r.unreachable or None,
        "evidence": r.evidence,
        "state": copy.state,
        "verification": copy.verification,
        "verification_basis": copy.verification_basis,
        "verified_at": copy.verified_at,
        "bytes": copy.bytes,
        "files": copy.file_count,
        "parts": [{"tier": p.tier, "storage_class": p.storage_class, "bytes": p.bytes} for p in r.parts],
        "estimated_seconds": round(r.seconds, 1),
        "restore_delay_seconds": r.delay_s,
        "transfer_seconds": round(r.transfer_s, 1),
        "commands": r.commands,
        "notes": r.notes,
    }


class RecoveryView(APIView):
    """The checkpoint to restore a run from, its copies ranked by estimated restore time, and the fallbacks."""

    @extend_schema(
        responses=inline_serializer(
            "Recovery",
            {
                "run": AsciiIntegerField(),
                "checkpoint": AsciiIntegerField(allow_null=True),
                "label": serializers.CharField(allow_null=True),
                "verified": serializers.BooleanField(),
                "warnings": serializers.ListField(child=serializers.CharField()),
                "copies": serializers.ListField(child=serializers.DictField()),
                "unusable": serializers.ListField(child=serializers.DictField()),
                "unreachable": serializers.ListField(child=serializers.DictField()),
                "fallbacks": serializers.ListField(child=serializers.DictField()),
                "skipped": serializers.ListField(child=serializers.DictField()),
                "assumptions": serializers.DictField(),
                "pointers": serializers.ListField(child=serializers.DictField()),
            },
        )
    )
    def get(self, request, pk: int):
        run = get_object_or_404(restrict_runs(Run.objects.select_related("team"), request.user), pk=pk)
        _point, rec = recovery_of(run)
        ranked = [*rec.copies, *rec.unusable, *rec.unreachable, *(f.best for f in rec.fallbacks if f.best)]
        lay = layouts_of(r.copy for r in ranked)  # one query of files for every copy listed, not one per copy
        return Response(
            {
                "run": run.pk,
                "checkpoint": rec.checkpoint.pk if rec.checkpoint else None,
                "label": rec.checkpoint.label if rec.checkpoint else None,
                "verified": rec.verified,
                "warnings": rec.warnings,
                "copies": [_copy(r, lay) for r in rec.copies],
                "unusable": [_copy(r, lay) | {"reasons": r.why} for r in rec.unusable],
                "unreachable": [_copy(r, lay) for r in rec.unreachable],
                "fallbacks": [
                    {
                        "checkpoint": f.checkpoint.pk,
                        "label": f.checkpoint.label,
                        "verified": f.verified,
                        "best": _copy(f.best, lay) if f.best else None,
                    }
                    for f in rec.fallbacks
                ],
                # Newer checkpoints passed over, and why: not verified, disputed (with what would settle it), broken.
                "skipped": [
                    {"checkpoint": s.checkpoint.pk, "label": s.checkpoint.label, "kind": s.kind, "why": s.why}
                    for s in rec.skipped
                ],
                "assumptions": {
                    tier: {"mib_per_s": a.mib_per_s, "delay_s": a.delay_s, "basis": a.basis}
                    for tier, a in rec.assumptions.items()
                },
                # What each framework resumes from on a restart, per location, worst first (catalog.pointers).
                "pointers": [p.as_dict() for p in pointers_for_run(run)],
            }
        )


class JobListView(APIView):
    """The newest scans, promotions and deletions, with state and progress (``kind``, ``state`` filter)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("kind", str, enum=list(KINDS)),
            OpenApiParameter("state", str, enum=list(STATES)),
        ],
        responses=inline_serializer("JobList", {"jobs": serializers.ListField(child=serializers.DictField())}),
    )
    def get(self, request):
        kind = request.query_params.get("kind", "")
        state = request.query_params.get("state", "")
        if kind and kind not in KINDS:
            raise serializers.ValidationError({"kind": f"one of {', '.join(KINDS)}"})
        if state and state not in STATES:
            raise serializers.ValidationError({"state": f"one of {', '.join(STATES)}"})
        jobs = recent_jobs(kind=kind, state=state, limit=JOBS_LIMIT, user=request.user)
        return Response(
            {
                "jobs": [
                    j.as_json()
                    | {
                        "kind": j.kind,
                        "id": j.pk,
                        "title": j.title,
                        "url": request.build_absolute_uri(j.url),
                        "requested_at": j.at,
                        "started_at": j.started_at,
                        "finished_at": j.finished_at,
                        "by": j.by,
                    }
                    for j in jobs
                ]
            }
        )


class OverviewView(APIView):
    """The overview's headline: stored bytes, this month's spend, forecast and trend, and what needs attention."""

    @extend_schema(
        responses=inline_serializer(
            "Overview",
            {
                "as_of": serializers.DateField(allow_null=True),
                "currency": serializers.CharField(),
                "stored_bytes": AsciiIntegerField(),
                "files": AsciiIntegerField(),
                "spend_to_date": AsciiDecimalField(max_digits=20, decimal_places=2),
                "forecast": AsciiDecimalField(max_digits=20, decimal_places=2, allow_null=True),
                "last_month": AsciiDecimalField(max_digits=20, decimal_places=2),
                "attention": serializers.ListField(child=serializers.DictField()),
            },
        )
    )
    def get(self, request):
        basis, summary = overview_basis(request.user)
        return Response(
            {
                "as_of": basis.as_of,
                "currency": basis.currency,
                "stored_bytes": summary.stored,
                "files": summary.files,
                "spend_to_date": f"{summary.spend:.2f}",
                "forecast": None if summary.forecast is None else f"{summary.forecast:.2f}",
                "last_month": f"{summary.previous:.2f}",
                "attention": [
                    {
                        "key": a["key"],
                        "label": a["label"],
                        "count": a["count"],
                        "bytes": a.get("bytes"),
                        "url": a["url"],
                    }
                    for a in attention_items(request.user, basis)
                ],
            }
        )
