"""Record real answers of the API's read operations as the OpenAPI schema's response examples.

    manage.py seed_demo                       # on a scratch CKPTFLEET_VAR_DIR and database
    manage.py api_examples                    # print which operations it would record, and their status
    manage.py api_examples --write            # write them to ckptfleet/api_examples.json

To regenerate the committed file (after an API change; docs/api.md, "API tokens"), on a scratch database (without
``DATABASE_URL`` the SQLite file is in ``CKPTFLEET_VAR_DIR``)::

    unset DATABASE_URL; export CKPTFLEET_DEBUG=1 CKPTFLEET_VAR_DIR=$(mktemp -d)
    manage.py migrate && manage.py seed_demo && manage.py api_examples --write

then commit ``ckptfleet/api_examples.json``. It seeds nothing and sends only GETs: every GET operation of
``/api/v1/schema/`` without an explicit example (the host agents' own reads aside: they sign URLs and claim
work) is called with Django's test client as the demo admin (``demo``), ids in its path filled with the first
real object of the kind the path names. An empty answer (the demo has no such object) is left to a
hand-written example (in its app's ``api_examples.py``); each other 2xx answer is kept trimmed (lists to their
first two items, long strings cut), the scratch directory shown as a real install's, and any value that looks
like a secret (a key naming a token, secret or password, a ``cfu_``/``cfh_`` token, a presigned URL) replaced,
so the file holds nothing that would sign anyone in. ``ckptfleet.schema.attach_recorded_examples`` shows each
recorded body as its operation's response example.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.test import Client
from drf_spectacular.generators import SchemaGenerator

from actions.models import DeletionJob
from approvals.models import ChangeRequest
from audit.models import AuditEvent
from catalog.models import Checkpoint, Run
from ckptfleet.schema import EXAMPLES_FILE, has_example
from fleet.models import Host, Inventory, StorageLocation
from promotion.models import PromotionJob
from retention.models import RetentionPolicy, TieringPolicy

# Which object an id in a path names: the nearest of these words before it.
ID_OF = [
    ("tiering-policies/", TieringPolicy),
    ("policies/", RetentionPolicy),
    ("hosts/", Host),
    ("locations/", StorageLocation),
    ("inventories/", Inventory),
    ("inventory-list/", Inventory),
    ("checkpoints/", Checkpoint),
    ("deletions/", DeletionJob),
    ("promotions/", PromotionJob),
    ("changes/", ChangeRequest),
    ("audit/", AuditEvent),
    ("runs/", Run),
    ("recovery/", Run),
]
# Path parameters that are not ids, and query parameters an operation needs to say something.
NAMED = {"name": "by-team"}
QUERY = {
    "change_request_list": {"state": "all"},  # the demo's changes are decided: none awaits approval
}
QUERY_IDS = {"checkpoint": Checkpoint, "run": Run, "host": Host, "location": StorageLocation}
SKIP_PREFIX = "/api/v1/agent/"  # the host agents' reads sign URLs and start uploads: examples by hand

LIST_ITEMS = 2
STRING_MAX = 300
SECRET_KEY = re.compile(r"token|secret|password|signature|credential", re.I)
SECRET_VALUE = re.compile(r"\bcf[uh]_\w+|X-Amz-Signature=|Signature=", re.I)


VAR_DIR_SHOWN = "/var/lib/ckptfleet"  # the scratch directory the demo was seeded in, as a real install's


def trim(value: Any, key: str = "") -> Any:
    """The value with lists cut to their first items, long strings cut, secret-looking values replaced and the
    scratch CKPTFLEET_VAR_DIR shown as a real install's."""
    if isinstance(value, dict):
        return {k: trim(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [trim(v, key) for v in value[:LIST_ITEMS]]
    if isinstance(value, str):
        value = value.replace(str(settings.VAR_DIR).rstrip("/"), VAR_DIR_SHOWN)
        if (SECRET_KEY.search(key) and value) or SECRET_VALUE.search(value):
            return "<redacted>"
        return value if len(value) <= STRING_MAX else value[: STRING_MAX - 1] + "…"
    return value


class Missing(Exception):
    """No object of the kind a path or parameter names: the operation is left to a hand-written example."""


def first(model) -> str:
    obj = model.objects.order_by("pk").first()
    if obj is None:
        raise Missing(f"no {model._meta.verbose_name} in this database")
    return str(obj.pk)


def query(op: dict) -> dict[str, str]:
    """The operation's required query parameters, each an id of a real object."""
    out = {}
    for param in op.get("parameters", []):
        if param.get("in") == "query" and param.get("required"):
            if param["name"] not in QUERY_IDS:
                raise Missing(f"no value for the required parameter {param['name']}")
            out[param["name"]] = first(QUERY_IDS[param["name"]])
    return out


def fill(path: str) -> str:
    """The schema path with each {parameter} filled with a real object's id (or a real name)."""
    out, at = "", 0
    for match in re.finditer(r"\{(\w+)\}", path):
        before = path[: match.start()]
        if match.group(1) in NAMED:
            value = NAMED[match.group(1)]
        else:
            near = [(before.rfind(word) + len(word), len(word), m) for word, m in ID_OF if word in before]
            model = max(near, key=lambda n: n[:2])[2] if near else None
            if model is None:
                raise CommandError(f"no object kind for {{{match.group(1)}}} in {path}")
            value = first(model)
        out += path[at : match.start()] + value
        at = match.end()
    return out + path[at:]


class Command(BaseCommand):
    help = "Record the demo fleet's answers to the API's read operations as OpenAPI response examples."

    def add_arguments(self, parser):
        parser.add_argument("--write", action="store_true", help=f"write {EXAMPLES_FILE.name} (else only list)")
        parser.add_argument("--user", default="demo", help="who reads (an admin of the demo fleet)")
        parser.add_argument("--output", default=str(EXAMPLES_FILE), help="where --write writes (default: %(default)s)")

    def handle(self, *args, write: bool, user: str, output: str, **options):
        person = get_user_model().objects.filter(username=user).first()
        if person is None:
            raise CommandError(f"no user {user!r}: run manage.py seed_demo first")
        client = Client(HTTP_HOST=(settings.ALLOWED_HOSTS or ["localhost"])[0].lstrip(".") or "localhost")
        client.force_login(person)
        schema = SchemaGenerator().get_schema(request=None, public=True)
        recorded: dict[str, dict] = {}
        failed: list[str] = []
        skipped: list[str] = []
        for path, item in sorted(schema["paths"].items()):
            op = item.get("get")
            if op is None or path.startswith(SKIP_PREFIX) or has_example(op, recorded=False):
                continue
            oid = op["operationId"]
            try:
                url, params = fill(path), query(op)
            except Missing as why:
                skipped.append(f"{oid}: not recorded, {why} (give it one in its app's api_examples.py)")
                continue
            params = {**QUERY.get(oid, {}), **params}
            response = client.get(url, params, HTTP_ACCEPT="application/json")
            if params:
                url += "?" + "&".join(f"{k}={v}" for k, v in params.items())
            if not 200 <= response.status_code < 300 or "json" not in response.get("Content-Type", ""):
                failed.append(f"{oid}: GET {url} answered {response.status_code}")
                continue
            body = response.json()
            if body in ([], {}) or (isinstance(body, dict) and body.get("results") == []):
                skipped.append(
                    f"{oid}: not recorded, GET {url} answered an empty list (give it one in its app's api_examples.py)"
                )
                continue
            recorded[oid] = {"status": response.status_code, "path": url, "body": trim(body)}
            self.stdout.write(f"{oid}: GET {url} {response.status_code}")
        for line in skipped + failed:
            self.stderr.write(line)
        if write:
            Path(output).write_text(json.dumps(recorded, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
            self.stdout.write(f"wrote {len(recorded)} examples to {output}")
        if failed:
            raise CommandError(f"{len(failed)} operations did not answer 2xx (named above)")
