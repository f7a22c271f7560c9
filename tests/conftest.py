"""Shared fixtures: personas, hosts with tokens, inventories, and real services.

With REQUIRE_SERVICES=1 (CI) a test that needs PostgreSQL, Redis, a Celery worker, an S3 endpoint
or a browser fails when that part is missing instead of skipping.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from audit.actor import Actor
from ckptfleet.celery import app as celery_app
from fleet.services import gzip_lines, host_register, host_token_issue, location_add

# tests.helpers.clock: `--clock=INSTANT` runs each test at that instant (`make test-calendar`); tests.agent_build builds
# the one-file agent once per session and finds the oldest Python it supports.
pytest_plugins = ["tests.s3", "tests.agent_build", "tests.helpers.clock"]

REQUIRE_SERVICES = os.environ.get("REQUIRE_SERVICES") == "1"

# Hundreds of tests make a person with a password, and Django's PBKDF2 (1,000,000 rounds) costs about half a second of
# CPU for each: minutes of every pass. No test checks the hasher's strength (production keeps Django's default), so the
# suite hashes with MD5, set before any test runs so that the live server's thread and every test see the same list.
settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def need_service(name: str, available: bool, why: str = "") -> None:
    """Skip when a service is missing, or fail when CI says every service must be there."""
    if available:
        return
    message = f"{name} is not available{': ' + why if why else ''}"
    if REQUIRE_SERVICES:
        pytest.fail(f"REQUIRE_SERVICES=1 but {message}")
    pytest.skip(message)


def port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((host, port)) == 0


def wait_for(predicate: Callable[[], bool], *, timeout: float = 30, interval: float = 0.1, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or predicate}")


@pytest.fixture(autouse=True)
def _hard_deletes_unless_asked(settings):
    """Deletions delete at once (no trash window) unless a test of soft delete sets ``SOFT_DELETE_DAYS``."""
    settings.SOFT_DELETE_DAYS = 0
    settings.SOFT_DELETE_REQUIRED = False


@pytest.fixture(autouse=True)
def _tasks_run_in_process():
    """Tasks run in the test process unless a test asks for the real worker."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = previous


@pytest.fixture
def actor() -> Actor:
    return Actor.command(label="tests")


class HostKit:
    """A registered host with one root and its token, as an operator would set it up."""

    def __init__(self, name: str, root: str, *, template: str = "{team}/{run}") -> None:
        actor = Actor.command(label="tests")
        self.host = host_register(name=name, site="dc1", region="eu-west", actor=actor)
        self.location = location_add(
            host=self.host,
            name=f"{name}:{root}",
            kind="nvme",
            tier="nvme",
            root_path=root,
            path_template=template,
            actor=actor,
        )
        self.token = host_token_issue(host=self.host, actor=actor)
        self.root = self.location.root_path

    def auth(self) -> dict[str, str]:
        return {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}

    def lines(self, files: list[dict], *, host: str | None = None, root: str | None = None, end: bool = True):
        header = {
            "type": "header",
            "format": "ckptfleet-inventory/1",
            "host": host or self.host.name,
            "root": root or self.root,
            "agent": "tests",
            "started_at": "2026-11-21T12:00:00Z",
        }
        out = [header, *({"type": "file", **f} for f in files)]
        if end:
            out.append({"type": "end", "files": len(files), "bytes": sum(f["size"] for f in files)})
        return out

    def body(self, files: list[dict], **kwargs) -> bytes:
        return gzip_lines(self.lines(files, **kwargs))


@pytest.fixture
def make_host(db) -> Callable[..., HostKit]:
    def make(name: str = "gpu-a01", root: str = "/mnt/nvme0/checkpoints", **kwargs) -> HostKit:
        return HostKit(name, root, **kwargs)

    return make


@pytest.fixture
def host_tree(tmp_path, make_host, monkeypatch) -> tuple[HostKit, Path]:
    """gpu-a01 with the demo's real checkpoints (DCP, Lightning...) on its NVMe root, registered with a token in the
    environment, as its agent runs: ``kit, root = host_tree``."""
    import shutil

    from dashboard.management.commands.seed_demo import DEMO_TREES

    root = tmp_path / "nvme0"
    shutil.copytree(DEMO_TREES / "nvme-a", root)
    kit = make_host("gpu-a01", str(root))
    monkeypatch.setenv("CKPTFLEET_TOKEN", kit.token)
    monkeypatch.delenv("CKPTFLEET_TOKEN_FILE", raising=False)
    return kit, root


@pytest.fixture
def push(client, django_capture_on_commit_callbacks):
    """Upload an inventory of ``files`` for a host kit through the API and let its ingestion task run.

    As the worker would; the upload must be accepted (202). tests/fleet/test_ingest.py has a ``push``
    of its own that returns the response instead, for the tests of refusals.
    """

    def push(kit: HostKit, files: list[dict]) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(
                "/api/v1/inventories/",
                data=kit.body(files),
                content_type="application/x-ndjson",
                HTTP_CONTENT_ENCODING="gzip",
                **kit.auth(),
            )
        assert response.status_code == 202, response.content

    return push


# Modules whose tests (those that use no database fixture) run the same code the same way on either database: the
# PostgreSQL pass leaves them to the SQLite pass. A test of such a module that uses the database still runs in both.
SQLITE_PASS_ONLY = frozenset(
    {
        "tests/actions/test_settings_grace.py",
        "tests/approvals/test_settings.py",
        "tests/catalog/test_digests.py",
        "tests/catalog/test_formats.py",
        "tests/catalog/test_recognition_fixtures.py",
        "tests/ckptfleet/test_api_schema.py",
        "tests/ckptfleet/test_deploy_check.py",
        "tests/ckptfleet/test_row_locks.py",
        "tests/dashboard/test_formatting.py",
        "tests/docs/test_docs_site.py",
        "tests/docs/test_readme_commands.py",
        "tests/docs/test_shell_blocks.py",
        "tests/fleet/test_agent.py",
        "tests/fleet/test_agent_build.py",
        "tests/fleet/test_agent_checksums.py",
        "tests/fleet/test_agent_pipeline.py",
        "tests/fleet/test_agent_scrub.py",
        "tests/fleet/test_scan_listing_parser.py",
        "tests/promotion/test_settings_presign.py",
        "tests/reliability/test_broker_restart.py",
        "tests/reliability/test_static_checks.py",
        "tests/retention/test_rules_property.py",
        "tests/scripts/test_demo.py",
        "tests/test_compose.py",
        "tests/test_image_contents.py",
    }
)
USES_DATABASE = {"db", "transactional_db", "live_server", "django_db_reset_sequences", "django_db_serialized_rollback"}


# A test that drives Chromium checks what a browser does with the pages (their scripts, forms, layout and the journey
# through them); the server's side of every page and action is checked on both databases by the tests without a
# browser (the test client, the services). So `make test` runs each browser test in one pass: the whole pages of
# tests/browser/ in the SQLite pass (the demo's database, as a newcomer first sees them), the browser tests of each
# app's actions in the PostgreSQL pass (production's database, where the row locks and triggers are real).
# BROWSER_BOTH_PASSES=1 runs them in both.
BROWSER_FIXTURES = frozenset({"chromium", "browser_page", "person"})
BROWSER_BOTH_PASSES = os.environ.get("BROWSER_BOTH_PASSES") == "1"


def browser_pass_of(nodeid: str) -> str:
    """The pass (``"sqlite"`` or ``"postgresql"``) that runs the browser test ``nodeid``."""
    return "sqlite" if nodeid.startswith("tests/browser/") else "postgresql"


def other_browser_pass(nodeid: str) -> str:
    """Why the browser test ``nodeid`` does not run in this pass, or "" when it does."""
    runs_in = browser_pass_of(nodeid)
    if BROWSER_BOTH_PASSES or runs_in == connection.vendor:
        return ""
    name = "SQLite" if runs_in == "sqlite" else "PostgreSQL"
    return f"a browser test: the {name} pass runs it (tests/conftest.py browser_pass_of)"


def skip_unless_this_browser_pass(nodeid: str) -> None:
    """Skip a browser test here when the other pass runs it (where a test starts a browser of its own accord)."""
    if why := other_browser_pass(nodeid):
        pytest.skip(why)


def pytest_collection_modifyitems(config, items):
    postgres = is_postgres()
    once = pytest.mark.skip(reason="touches no database: the SQLite pass runs it (tests/conftest.py SQLITE_PASS_ONLY)")
    for item in items:
        if BROWSER_FIXTURES & set(item.fixturenames) and (why := other_browser_pass(item.nodeid)):
            item.add_marker(pytest.mark.skip(reason=why))
            continue
        if not postgres:
            continue
        uses_database = item.get_closest_marker("django_db") is not None or bool(USES_DATABASE & set(item.fixturenames))
        if item.nodeid.split("::")[0] in SQLITE_PASS_ONLY and not uses_database:
            item.add_marker(once)


def is_postgres() -> bool:
    return connection.vendor == "postgresql"


def in_the_sqlite_pass_only(checks: str) -> pytest.MarkDecorator:
    """Checks of the pages' markup (what fits a width, what axe reads) are the same on both databases: run once, in
    the SQLite pass of `make test`, to keep the suite's time down."""
    return pytest.mark.skipif(
        is_postgres(), reason=f"the pages' markup does not depend on the database; {checks} run in the SQLite pass"
    )


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """Let the test runner empty the audit and hold tables between transactional tests on PostgreSQL.

    Production keeps the TRUNCATE trigger; here only the flush between tests needs it off, and the
    test of that trigger switches it back on inside its own rolled-back transaction.
    """
    with django_db_blocker.unblock():
        let_the_test_runner_flush()
    yield
    with django_db_blocker.unblock():
        end_stray_sessions()


def end_stray_sessions() -> None:
    """On PostgreSQL, end any other session still on the test database when the run ends (a worker or thread a test
    left behind), naming it, so the runner can drop the database instead of warning that it is in use."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, application_name, state, left(query, 120) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        stray = cursor.fetchall()
        for pid, app, state, query in stray:
            sys.stderr.write(f"\ntests: ending a session left on the test database: {pid} {app!r} {state} {query!r}\n")
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])


def let_the_test_runner_flush() -> None:
    """Take away the audit triggers that refuse the runner's flush: TRUNCATE on PostgreSQL, DELETE on SQLite (the
    tests of those triggers put them back inside their own rolled-back transaction). A test that migrates the
    audit app forward again calls this after it."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ALTER TABLE catalog_auditevent DISABLE TRIGGER catalog_auditevent_no_truncate")
            cursor.execute("ALTER TABLE catalog_auditchainhead DISABLE TRIGGER audit_chain_head_no_truncate")
            # Likewise the holds' TRUNCATE guard (actions.holdguard): a test that placed a compliance hold then
            # flushes; the row-level guard stays on and tests/actions/test_hold_modes.py tests both.
            cursor.execute("ALTER TABLE actions_hold DISABLE TRIGGER actions_hold_no_truncate")
        else:
            for name in FLUSH_BLOCKING_SQLITE_TRIGGERS:
                cursor.execute(f"DROP TRIGGER IF EXISTS {name}")


FLUSH_BLOCKING_SQLITE_TRIGGERS = ("catalog_auditevent_no_delete", "audit_chain_head_no_delete")


@pytest.fixture(autouse=True)
def _no_audit_anchors_unless_asked():
    """Anchors live outside the database, so they outlast a test's rolled-back events: a test that anchors names
    its own directory (``audit_anchor_dir``), and every other test writes and reads none."""
    from django.conf import settings

    previous = (settings.AUDIT_ANCHOR_DIR, settings.AUDIT_ANCHOR_S3)
    settings.AUDIT_ANCHOR_DIR, settings.AUDIT_ANCHOR_S3 = "", ""
    yield
    settings.AUDIT_ANCHOR_DIR, settings.AUDIT_ANCHOR_S3 = previous


@pytest.fixture
def audit_anchor_dir(tmp_path):
    """A directory of signed anchor files of this test's own, configured as CKPTFLEET_AUDIT_ANCHOR_DIR."""
    from django.conf import settings

    directory = tmp_path / "audit-anchors"
    settings.AUDIT_ANCHOR_DIR = str(directory)
    return directory


def _forget_broker_connections() -> None:
    """Drop the app's cached connection and producer pools, as Celery itself does after a fork."""
    celery_app._pool = None
    amqp = celery_app.__dict__.get("amqp")
    if amqp is not None:
        amqp._producer_pool = None


@pytest.fixture
def celery_worker_process(transactional_db, settings, tmp_path):
    """A real `celery worker` process on Redis and this test's PostgreSQL database.

    Yields once the worker answers a ping; the test's tasks go through the broker, not in-process.
    """
    import subprocess
    import sys

    if connection.vendor != "postgresql":
        pytest.skip("a separate worker process needs a shared database; this runs in the PostgreSQL pass")
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    need_service("Redis", port_open("127.0.0.1", 6379), "start it with scripts/services-up")
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": redis_url,
        "CKPTFLEET_DEBUG": "1",
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "CELERY_TASK_ALWAYS_EAGER": "0",
        # The worker reads and writes the same anchors as the test (none unless the test configured a directory).
        "CKPTFLEET_AUDIT_ANCHOR_DIR": settings.AUDIT_ANCHOR_DIR,
        "CKPTFLEET_SOFT_DELETE_DAYS": str(settings.SOFT_DELETE_DAYS),
    }
    queue = f"tests-{os.getpid()}-{time.monotonic_ns()}"
    log = tmp_path / "worker.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "ckptfleet",
            "worker",
            "-P",
            "solo",
            "-Q",
            queue,
            "-n",
            f"{queue}@%h",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "info",
        ],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    celery_app.conf.task_always_eager = False
    previous = (celery_app.conf.broker_url, celery_app.conf.task_default_queue)
    celery_app.conf.broker_url = redis_url
    celery_app.conf.task_default_queue = queue
    # Eager .delay() calls earlier in the session cached a producer pool on the old broker URL;
    # without a fresh pool the ping and the test's tasks would go nowhere.
    _forget_broker_connections()
    try:

        def answers() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"the worker exited: {log.read_text()[-2000:]}")
            return bool(celery_app.control.ping(destination=[f"{queue}@{socket.gethostname()}"], timeout=0.5))

        wait_for(answers, timeout=60, what="the Celery worker to answer a ping")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        celery_app.conf.broker_url, celery_app.conf.task_default_queue = previous
        celery_app.conf.task_always_eager = True
        _forget_broker_connections()


def give_roles(user, *roles: str) -> None:
    """Add ``user`` to the group of each role (roles are groups: access.roles)."""
    from django.contrib.auth.models import Group

    for role in roles:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    for cached in ("_ckptfleet_roles", "_ckptfleet_groups"):
        user.__dict__.pop(cached, None)


@pytest.fixture
def signed_in_as(db, django_user_model):
    """Sign a new person in with the given roles (none: signed in without any role).

    ``signed_in_as("operator")`` returns a fresh test client; its person is ``client.user``.
    Each call makes another person, named after the roles unless ``username`` says otherwise.
    """
    from django.test import Client

    made: list[str] = []

    def sign_in(*roles: str, username: str = "", **user_fields):
        name = username or "-".join(roles or ("norole",))
        if name in made:
            name = f"{name}-{len(made)}"
        made.append(name)
        user = django_user_model.objects.create_user(username=name, password="a-long-password-1", **user_fields)
        give_roles(user, *roles)
        client = Client()
        client.force_login(user)
        client.user = user
        return client

    return sign_in


@pytest.fixture
def signed_in(client, django_user_model):
    """A client signed in as an ordinary person (no staff rights) holding the admin role.

    Admin holds every role, so a test of a page or an action passes the role checks; a test of the
    roles themselves uses ``signed_in_as``.
    """
    user = django_user_model.objects.create_user(username="ada", password="a-long-password-1")
    give_roles(user, "admin")
    client.force_login(user)
    client.user = user
    return client


def queries_for(client, url: str) -> int:
    """How many queries one page view makes (it must answer 200)."""
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries)


def restore_default_prices() -> None:
    """Put back the price book's shipped defaults if the table is empty.

    They come with a data migration (fleet 0005); a transactional test (every live-server test) ends
    by flushing the tables, which takes them away from every test that runs after it.
    """
    import importlib

    from django.apps import apps

    from fleet.models import PricePoint

    if not PricePoint.objects.exists():
        importlib.import_module("fleet.migrations.0005_default_prices").add_defaults(apps, None)


@pytest.fixture(autouse=True)
def _default_price_book(request):
    """Every test with the database starts with the shipped price book, whatever ran before it."""
    uses_db = request.node.get_closest_marker("django_db") is not None or bool(
        {"db", "transactional_db", "live_server"} & set(request.fixturenames)
    )
    if uses_db:
        request.getfixturevalue("_django_db_helper")  # the database is set up for this test first
        restore_default_prices()
    yield


@pytest.fixture
def browser_page(request):
    """A Chromium page (Debian's, driven by Playwright) of its own browser; ``page.console_errors`` collects errors.

    Skips without Chromium or Playwright, or fails under REQUIRE_SERVICES=1.
    """
    # Here, not at the top: tests.browser.visitor imports need_service from this module.
    from tests.browser.visitor import launch_chromium

    skip_unless_this_browser_pass(request.node.nodeid)
    playwright, browser = launch_chromium()
    try:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.console_errors = errors
        yield page
    finally:
        browser.close()
        playwright.stop()
