"""The problems list: every partial, corrupt, disputed, unverified, under-replicated, misplaced and orphaned item
in one filterable, sortable list (``dashboard.problems``), and the same list as CSV."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from datetime import UTC

from django.contrib.auth.decorators import login_required
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from access.roles import Role, has_role
from ckptfleet.params import whole_number
from dashboard import problems
from dashboard.views_audit import _cell, _Echo
from fleet.models import StorageLocation

CSV_COLUMNS = [
    "kind",
    "subject",
    "subject_label",
    "team",
    "run",
    "location",
    "reasons",
    "since_utc",
    "age_days",
    "bytes",
    "cost_per_month",
    "currency",
    "action",
    "action_url",
]


def _page_number(request) -> int:
    raw = request.GET.get("page") or "1"
    return whole_number(raw, "page", minimum=1, maximum=10_000_000)


@login_required
def problem_list(request):
    filters = problems.filters_from(request.GET, request.user)
    page = problems.problem_page(filters, request.user, number=_page_number(request))
    filtered = any((filters.kind, filters.team_id, filters.run_id, filters.location_id, filters.min_age_days))
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "problems/list.html",
        {
            "page": page,
            "filters": filters,
            "raw": request.GET,
            "filtered": filtered,
            "kinds": problems.Kind.choices,
            "kind_description": problems.KIND_HELP[problems.Kind(filters.kind)] if filters.kind else "",
            "sort_links": _sort_links(request, filters.sort),
            "teams": problems.team_choices(request.user),
            "locations": StorageLocation.objects.order_by("name").only("pk", "name"),
            "ages": problems.AGE_CHOICES,
            "sorts": problems.SORTS,
            "query": query.urlencode(),
            "scoped": problems.is_scoped(request.user),
            "can_act": has_role(request.user, Role.OPERATOR),
        },
    )


def _sort_links(request, current: str) -> dict[str, dict[str, str]]:
    """Each sortable column's link (the other filters kept, back to page 1) and its aria-sort when it is the sort.
    A second click turns the order round; since starts oldest first, size and cost largest first."""
    links = {}
    for column, first in (("age", "age"), ("bytes", "-bytes"), ("cost", "-cost")):
        flipped = first[1:] if first.startswith("-") else f"-{first}"
        sort = flipped if current == first else first
        query = request.GET.copy()
        query.pop("page", None)
        query["sort"] = sort
        state = ""
        if current.lstrip("-") == column:
            # Oldest first is ascending time; "-bytes" is descending.
            state = "descending" if current.startswith("-") else "ascending"
        links[column] = {"url": f"?{query.urlencode()}", "current": state}
    return links


def csv_rows(rows, currency: str) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(CSV_COLUMNS)
    for p in rows:
        yield writer.writerow(
            [
                p.kind,
                p.subject,
                _cell(p.subject_label),
                _cell(p.team),
                _cell(p.run_label),
                _cell(p.location_name),
                _cell("; ".join(p.reasons)),
                p.since.astimezone(UTC).isoformat() if p.since else "",
                "" if p.age_days is None else p.age_days,
                p.bytes,
                "" if p.cost is None else f"{p.cost:.4f}",
                currency,
                _cell(p.action_label),
                _cell(p.action_url),
            ]
        )


@login_required
def problem_export(request):
    """The filtered list as CSV in the page's order, streamed: exact bytes, cost per month to 4 decimals."""
    filters = problems.filters_from(request.GET, request.user)
    rows = problems.all_problems(filters, request.user)
    currency = problems.book_currency()
    response = StreamingHttpResponse(csv_rows(rows, currency), content_type="text/csv; charset=utf-8")
    stamp = timezone.now().astimezone(UTC).strftime("%Y-%m-%d")
    response["Content-Disposition"] = f'attachment; filename="problems-{stamp}.csv"'
    return response
