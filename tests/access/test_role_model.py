"""One role model for every surface: every page and every API read, walked by every role on the seeded demo fleet.

A read is a read in every format. Whoever may see a page may read the same data as JSON and download it as CSV
(and whoever may not is refused in each), so a gate on one format cannot be bypassed through another:

- every GET route of the URL map (pages and API, ids filled in with real objects of the demo) answers every role
  without a server error; a signed-in person with no role is refused everywhere but the public few;
- the surfaces that exist as a page, as JSON and as CSV agree, role by role, on allowed or refused;
- with team scoping on, a person of one team sees the same runs on the page, in the JSON and in the CSV, and
  another team's run is "not found" on its page and in the API alike.
"""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.urls import URLResolver, get_resolver

from access.roles import Role
from actions.models import DeletionJob, Hold, Lease, Pin
from approvals.models import ChangeRequest
from audit.models import AuditEvent
from catalog.models import Checkpoint, CheckpointCopy, Run, Team
from fleet.models import Host, Inventory, StorageLocation
from promotion.models import PromotionJob
from retention.models import RetentionPolicy, TieringPolicy
from tests.conftest import give_roles
from tests.helpers.demo_seed import seed_demo

pytestmark = pytest.mark.django_db

NO_ROLE = ""
PEOPLE = [NO_ROLE, *Role.values]

# Routes anyone may read, signed in or not, with or without a role.
PUBLIC = {"healthz/", "metrics", "accounts/login/", "accounts/logout/", "api/v1/schema/", "api/v1/docs/"}

# Which object an id in a route names: the nearest of these words before it.
ID_OF = [
    ("tiering/policies/", TieringPolicy),
    ("tiering-policies/", TieringPolicy),
    ("policies/", RetentionPolicy),
    ("hosts/", Host),
    ("locations/", StorageLocation),
    ("inventories/", Inventory),
    ("inventory-list/", Inventory),
    ("copies/", CheckpointCopy),
    ("checkpoints/", Checkpoint),
    ("deletions/", DeletionJob),
    ("holds/", Hold),
    ("pins/", Pin),
    ("leases/", Lease),
    ("promotions/", PromotionJob),
    ("moves/", PromotionJob),
    ("changes/", ChangeRequest),
    ("teams/", Team),
    ("audit/", AuditEvent),
    ("runs/", Run),
    ("recovery/", Run),
]
PLACEHOLDER = re.compile(r"<int:(\w+)>|\(\?P<(\w+)>\[0-9\]\{1,19\}\)")


def routes() -> list[str]:
    """Every route of the URL map but the admin's, as written (Django paths and DRF's regular expressions)."""
    found: list[str] = []

    def walk(patterns, prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            else:
                found.append(prefix + str(p.pattern))

    walk(get_resolver().url_patterns, "")
    return [r for r in found if not r.startswith("admin/")]


def concrete(route: str) -> str | None:
    """The route with each id filled in by a real object's (None: a route this walk does not fill)."""
    if "(?P<format>" in route or "<drf_format_suffix" in route or "<slug:" in route:
        return None  # format suffixes repeat their route; bulk results are one person's
    route = route.replace("^", "").replace("$", "")
    out, at = "", 0
    for match in PLACEHOLDER.finditer(route):
        before = route[: match.start()]
        model = next((m for word, m in sorted(ID_OF, key=lambda w: -before.rfind(w[0])) if word in before), None)
        if match.group(1) == "host_id" or match.group(2) == "host_id":
            model = Host
        obj = model.objects.order_by("pk").first() if model else None
        out += route[at : match.start()] + str(obj.pk if obj else 1)
        at = match.end()
    out += route[at:]
    if re.search(r"[\\(\[]", out):
        return None
    return "/" + out


def person(signed_in_as, role: str, username: str = ""):
    return signed_in_as(*([role] if role else []), username=username or f"walk-{role or 'norole'}")


@pytest.fixture
def demo_fleet(transactional_db, settings, tmp_path_factory):
    """The demo fleet, in a database emptied after the test (so that the seed can be copied back: demo_seed.py)."""
    seed_demo(settings, tmp_path_factory.getbasetemp())
    assert Run.objects.count() > 5 and DeletionJob.objects.exists()


def test_every_route_answers_every_role_without_a_server_error(demo_fleet, signed_in_as):
    urls = sorted({u for u in map(concrete, routes()) if u})
    assert len(urls) > 80, urls
    problems: list[str] = []
    for role in PEOPLE:
        client = person(signed_in_as, role)
        for url in urls:
            status = client.get(url).status_code
            if status >= 500:
                problems.append(f"{role or 'no role'}: GET {url} -> {status}")
            elif role == NO_ROLE and url.lstrip("/") not in PUBLIC and 200 <= status < 300:
                problems.append(f"no role: GET {url} -> {status} (should be refused)")
    assert problems == []


# (what, page, JSON, CSV or None): the same data in each format.
SURFACES = [
    ("runs", "/runs/", "/api/v1/runs/", None),
    ("a run", "/runs/{run}/", "/api/v1/runs/{run}/", None),
    ("a checkpoint", "/checkpoints/{checkpoint}/", "/api/v1/checkpoints/{checkpoint}/", None),
    ("recovery", "/recovery/{run}/", "/api/v1/recovery/{run}/", None),
    ("orphans", "/orphans/", "/api/v1/orphans/", None),
    ("the overview", "/", "/api/v1/overview/", None),
    ("spend", "/spend/", "/api/v1/spend/", "/api/v1/spend/by-team/?format=csv"),
    ("spend by run", "/spend/runs/", "/api/v1/spend/by-run/", "/api/v1/spend/by-run/?format=csv"),
    ("the spend report", "/spend/report/", "/api/v1/spend/by-tier/", "/api/v1/spend/by-tier/?format=csv"),
    ("teams", "/spend/teams/", "/api/v1/teams/", None),
    ("the audit trail", "/audit/", "/api/v1/audit/", "/audit/export.csv"),
    ("deletions", "/actions/deletions/", "/api/v1/actions/deletions/", None),
    ("a deletion", "/actions/deletions/{deletion}/", "/api/v1/actions/deletions/{deletion}/", None),
    ("promotions", "/promotions/", "/api/v1/promotions/", None),
    ("jobs", "/jobs/", "/api/v1/jobs/", None),
    ("approvals", "/approvals/", "/api/v1/approvals/changes/", None),
    ("retention policies", "/retention/policies/", "/api/v1/retention/policies/", None),
    ("tiering policies", "/retention/tiering/policies/", "/api/v1/retention/tiering-policies/", None),
    ("the fleet", "/fleet/", "/api/v1/hosts/", None),
    ("recovery points", "/recovery/points/", "/api/v1/recovery/points/", None),
]


def _fill(url: str, ids: dict[str, int]) -> str:
    return url.format(**ids)


def test_each_surface_answers_each_role_alike_in_every_format(demo_fleet, signed_in_as):
    ids = {
        "run": Run.objects.order_by("pk").first().pk,
        "checkpoint": Checkpoint.objects.order_by("pk").first().pk,
        "deletion": DeletionJob.objects.order_by("pk").first().pk,
    }
    disagree: list[str] = []
    for role in PEOPLE:
        client = person(signed_in_as, role)
        for what, *formats in SURFACES:
            answers = {url: client.get(_fill(url, ids)).status_code for url in formats if url}
            allowed = {url: 200 <= status < 300 for url, status in answers.items()}
            if len(set(allowed.values())) != 1:
                disagree.append(f"{role or 'no role'}, {what}: {answers}")
    assert disagree == []


def test_a_scoped_person_sees_the_same_runs_on_the_page_in_json_and_in_csv(demo_fleet, signed_in_as, settings):
    settings.CKPTFLEET_TEAM_SCOPING = True
    llm = Team.objects.get(name="llm")
    other = Run.objects.exclude(team=llm).order_by("pk").first()
    mine = set(Run.objects.filter(team=llm).values_list("name", flat=True))
    assert mine and other is not None
    client = person(signed_in_as, Role.VIEWER, username="scoped-viewer")
    give_roles(client.user, "team:llm")

    page = client.get("/runs/?page_size=500").content.decode()
    on_page = {name for name in Run.objects.values_list("name", flat=True) if f">{name}<" in page}
    as_json = {row["name"] for row in client.get("/api/v1/runs/?page_size=500").json()["results"]}
    assert on_page == as_json == mine

    spend_csv = client.get("/api/v1/spend/by-run/?format=csv")
    assert spend_csv.status_code == 200
    rows = list(csv.DictReader(io.StringIO(spend_csv.content.decode())))
    run_column = next(c for c in rows[0] if c.lower() == "run") if rows else "Run"
    named = [r[run_column] for r in rows if r[run_column] and r[run_column] != "Total"]
    assert named and {name.split("/")[-1] for name in named} <= mine
    assert all(name.startswith("llm/") for name in named)  # the team's runs only
    spend_json = client.get("/api/v1/spend/by-run/").json()
    assert len(spend_json["rows"]) == len(named)

    for url in (
        f"/runs/{other.pk}/",
        f"/api/v1/runs/{other.pk}/",
        f"/recovery/{other.pk}/",
        f"/api/v1/recovery/{other.pk}/",
    ):
        assert client.get(url).status_code == 404, url
