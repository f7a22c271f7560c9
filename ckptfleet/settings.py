"""Settings for Checkpoint Fleet, read from the environment.

With nothing set, the product runs on its embedded default: SQLite in ``var/``, Celery tasks executed
in-process. ``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL`` switch it to the production shape with a
Celery worker and beat as separate processes. See docs/admin/configuration.md for every variable.
"""

from __future__ import annotations

import secrets
from decimal import Decimal
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from ckptfleet.env import (
    audit_key_id,
    check_audit_key,
    check_url,
    env_bool,
    env_choice,
    env_int,
    env_json,
    env_keyring,
    env_list,
    env_secret,
    env_str,
    env_time_zone,
    parse_database_url,
    parse_owner_database_url,
)
from ckptfleet.rules import is_storage_class

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("CKPTFLEET_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("CKPTFLEET_DEBUG", False)


def _restore_assumptions() -> dict:
    """The JSON object of CKPTFLEET_RESTORE_ASSUMPTIONS; its tiers and numbers are checked at start by the catalog
    app (``CatalogConfig.ready``), which knows the tiers: settings import nothing of the apps."""
    import json

    raw = env_str("CKPTFLEET_RESTORE_ASSUMPTIONS")
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError too
        raise ImproperlyConfigured(f"CKPTFLEET_RESTORE_ASSUMPTIONS: {exc}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(
            "CKPTFLEET_RESTORE_ASSUMPTIONS: must be a JSON object of tier -> {mib_per_s, delay_s}"
        )
    return value


def _days(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(value)
    return value


def _price(value) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(value)
    price = Decimal(str(value).strip())
    if not price.is_finite() or price < 0:
        raise ValueError(value)
    return price


def _by_storage_class(name: str, value_of, what: str, example: str) -> dict:
    """A JSON object from NAME mapping storage classes to values, each checked by ``value_of``."""
    table = env_json(name, {})
    if not isinstance(table, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object by storage class, e.g. {example}")
    parsed = {}
    for key, value in table.items():
        if not is_storage_class(key):
            raise ImproperlyConfigured(f"{name}: {key!r} is not a storage class (upper case, e.g. GLACIER_IR)")
        try:
            parsed[key] = value_of(value)
        except (ValueError, ArithmeticError):  # decimal.InvalidOperation is an ArithmeticError
            raise ImproperlyConfigured(f"{name}: {key}={value!r} is not {what}") from None
    return parsed


def _secret_key() -> str:
    key = env_secret("DJANGO_SECRET_KEY")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) must be set unless CKPTFLEET_DEBUG=1")
    # A development key made once per checkout and kept out of git, so sessions survive restarts.
    key_file = VAR_DIR / "dev-secret-key"
    if not key_file.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()


def _audit_keys() -> tuple[str, dict[str, str]]:
    """The current audit key's id, and every key the verifier may need by id (the current one and the keyring's).

    Each audit event and anchor is an HMAC-SHA256 under the current key and names its id, so an event written before
    a rotation still verifies with the old key listed in CKPTFLEET_AUDIT_KEYRING_FILE."""
    key = env_secret("CKPTFLEET_AUDIT_KEY")
    if key:
        check_audit_key("CKPTFLEET_AUDIT_KEY", key)
    elif not DEBUG:
        raise ImproperlyConfigured(
            "CKPTFLEET_AUDIT_KEY_FILE (or CKPTFLEET_AUDIT_KEY) must be set unless CKPTFLEET_DEBUG=1: it keys the audit "
            "chain, so that whoever can write to the database still cannot rewrite the trail unnoticed"
        )
    else:
        # A development key made once per checkout, beside the development secret key and like it kept out of git.
        key_file = VAR_DIR / "dev-audit-key"
        if not key_file.exists():
            VAR_DIR.mkdir(parents=True, exist_ok=True)
            key_file.write_text(secrets.token_urlsafe(48))
            key_file.chmod(0o600)
        key = key_file.read_text().strip()
    keys = {audit_key_id(old): old for old in env_keyring("CKPTFLEET_AUDIT_KEYRING_FILE")}
    current = audit_key_id(key)
    keys[current] = key
    return current, keys


# Names with KEY in them: Django's error reports blank them out.
AUDIT_KEY_ID, AUDIT_KEYS = _audit_keys()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.humanize",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "audit",
    "access",
    "approvals",
    "fleet",
    "catalog",
    "actions",
    "ingest",
    "retention",
    "promotion",
    "spend",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy on every response: scripts from our static files only (CONTENT_SECURITY_POLICY below).
    "ckptfleet.middleware.ContentSecurityPolicyMiddleware",
    # NUL characters and oversized bodies are refused before anything reads them (400 and 413).
    "ckptfleet.middleware.RequestGuardMiddleware",
    # A query parameter the API's operation does not declare is a 400 naming it, not silently ignored.
    "ckptfleet.api_params.UnknownQueryParameterMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # Pages need a role; refused actions are audited after the view, in their own transaction.
    "access.middleware.RoleMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# What the pages may load: everything from this site, nothing from elsewhere (Chart.js and Swagger UI are served from
# static/), scripts only from files (no 'unsafe-inline': no inline <script>, no onclick=). Styles allow inline style
# attributes: two bars are drawn with a data-driven width (style="width: 42%"), and a style cannot run script.
# Images may be data: URLs (Swagger UI's icons). No framing, no <object>, forms post only here.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

# The product's own 404 and 500 pages under DEBUG too (the demo: people see it, not only developers).
ERROR_PAGES_IN_DEBUG = env_bool("CKPTFLEET_ERROR_PAGES", False)
if DEBUG and ERROR_PAGES_IN_DEBUG:
    MIDDLEWARE.insert(
        MIDDLEWARE.index("access.middleware.RoleMiddleware") + 1, "ckptfleet.middleware.ErrorPagesInDebugMiddleware"
    )

if not DEBUG:
    # Production serves its own static files; in development runserver does.
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

ROOT_URLCONF = "dashboard.site_urls"
WSGI_APPLICATION = "ckptfleet.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # What awaits approval, for the navigation's badge (dashboard.inbox; computed on first use).
                "dashboard.inbox.inbox",
            ],
        },
    },
]

_database_url = env_str("DATABASE_URL")
if _database_url:
    DATABASES = {"default": parse_database_url("DATABASE_URL", _database_url)}
else:
    DATABASES = {"default": parse_database_url("DATABASE_URL", f"sqlite:///{VAR_DIR / 'ckptfleet.sqlite3'}")}
    VAR_DIR.mkdir(parents=True, exist_ok=True)
# The role that owns the tables and runs `manage.py migrate` (and `fleet_db_roles`), when it is not the app's own:
# the same database as DATABASE_URL, another user. Unset, DATABASE_URL's role does both (docs/admin/database-roles.md).
MIGRATE_DATABASE = parse_owner_database_url(DATABASES["default"], env_str("MIGRATE_DATABASE_URL"))

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_time_zone("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "staticfiles")))
MEDIA_ROOT = Path(env_str("MEDIA_ROOT", str(VAR_DIR / "media")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Celery: with REDIS_URL, a worker and beat run as their own processes; without it, tasks run
# in-process when their transaction commits, which is the embedded default.
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    check_url("REDIS_URL", REDIS_URL, {"redis", "rediss"})
CELERY_BROKER_URL = REDIS_URL or "memory://localhost/"
CELERY_RESULT_BACKEND = None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not REDIS_URL)
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "ckptfleet"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker outlives any broker outage: it retries the connection for as long as it takes (Celery's
# default gives up after 100 tries), and on Redis it uses our transport (ckptfleet/broker.py), which
# survives a Redis restart and requeues the messages it held at once when Redis is back.
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
if REDIS_URL:
    CELERY_BROKER_TRANSPORT = "ckptfleet.broker:Transport"
# A message a worker took and never acknowledged (the worker was killed) goes back to the queue after
# this long. It must exceed the longest single run of a task, or a task still running is delivered a
# second time (harmless: tasks are idempotent and claim their work, but wasted). The lease of a
# deletion job (10 min) and of a promotion (CKPTFLEET_PROMOTION_LEASE_SECONDS) resend stalled work
# sooner anyway.
BROKER_VISIBILITY_TIMEOUT = env_int("CKPTFLEET_BROKER_VISIBILITY_TIMEOUT", 1800, minimum=60)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": BROKER_VISIBILITY_TIMEOUT,
    # Find a dead connection (a Redis restarted behind a proxy, a dropped NAT entry) within seconds,
    # not at the next TCP timeout.
    "health_check_interval": 10,
    "socket_keepalive": True,
    "socket_connect_timeout": 5,
    # Look for messages past their visibility timeout every 10 s (kombu's default: every 100 s).
    "unacked_restore_throttle": 1,
}
# On a lost broker connection, stop the acks_late tasks that are running: their acknowledgement could
# not be delivered anyway, and their messages go straight back to the queue to run again (every task
# survives being killed mid-way; tests/actions/test_execution_worker.py). Celery 6 makes this the default.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
# A message whose delivery keeps killing its worker (a crash, os._exit, the OOM killer) would come back
# forever with acks_late; after this many deliveries it is refused instead (ckptfleet/deliveries.py).
TASK_MAX_DELIVERIES = env_int("CKPTFLEET_TASK_MAX_DELIVERIES", 5, minimum=1)
CELERY_TIMEZONE = "UTC"

REST_FRAMEWORK = {
    # The token class first: DRF answers a request nobody authenticated with 401 (and WWW-Authenticate) only
    # when the first class names a scheme; the session class names none, and 401 became a misleading 403.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "access.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # JSON through ckptfleet.jsonsafe: deep nesting or a NUL character is a 400, not a RecursionError or
    # a PostgreSQL DataError.
    "DEFAULT_PARSER_CLASSES": [
        "ckptfleet.parsers.SafeJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["access.permissions.HasRole"],
    "DEFAULT_SCHEMA_CLASS": "ckptfleet.schema.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["ckptfleet.filters.AsciiDigitsFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "ckptfleet.pagination.IdCursorPagination",
    "PAGE_SIZE": 100,
    "EXCEPTION_HANDLER": "ckptfleet.errors.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Checkpoint Fleet API",
    "DESCRIPTION": (
        "Training checkpoints across hosts and buckets: inventory, state, spend and actions.\n\n"
        "**Getting a token.** Sign in to the dashboard and open **API tokens** (`/account/tokens/`, in the "
        "account menu): give the token a label and copy it; it is shown once (only a hash is kept). From a "
        'shell on the server: `python manage.py api_token create <username> --label "what it is for"`. '
        "A token acts as its person, with that person's roles at the moment of each request; revoke it on "
        "the same page (or `manage.py api_token revoke <username> --prefix <prefix>`).\n\n"
        "**Sending it.** In a header: `Authorization: Bearer cfu_...`, e.g. "
        '`curl -H "Authorization: Bearer $CKPTFLEET_TOKEN" https://fleet.example.com/api/v1/runs/`. '
        "Without it (or with a revoked one) the answer is 401 with `WWW-Authenticate: Bearer`. Host agents "
        "use their host's `cfh_` token, on the `/api/v1/agent/` and `/api/v1/inventories/` endpoints only.\n\n"
        '**Errors.** Every refusal is `{"error": code, "detail": message}`. A query parameter an '
        "operation does not list is a 400 naming it (`Unknown query parameter: team. Known: ...`); lists are "
        "paged with `cursor` (or `page`) and `page_size`."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Reads without an example of their own get the answer recorded from the demo (manage.py api_examples).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "ckptfleet.schema.attach_recorded_examples",
    ],
    # The interactive page is served from our own static files; nothing loads from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # A run's status and an inventory's are both "status": each its own named enum.
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "catalog.choices.RunStatus",
        "RunStatusSourceEnum": "catalog.choices.RunStatusSource",
    },
}

# Inventory uploads: a compressed body over this is refused with 413 before it is stored.
INVENTORY_MAX_BYTES = env_int("CKPTFLEET_INVENTORY_MAX_BYTES", 1024**3, minimum=1024)
INVENTORY_MAX_LINE = env_int("CKPTFLEET_INVENTORY_MAX_LINE", 4 * 1024**2, minimum=1024)
INGEST_CHUNK_ROWS = env_int("CKPTFLEET_INGEST_CHUNK_ROWS", 5000, minimum=100)
# Deletions: the grace period before a scheduled deletion may run (zero only in development), and the
# size above which a second person must approve it.
DELETION_GRACE_DAYS = env_int("CKPTFLEET_DELETION_GRACE_DAYS", 7, minimum=0 if DEBUG else 1)
# Development only (the demo): a grace period in minutes instead, so that a person sees a deletion go from
# scheduled to executed in a few minutes. When set (above 0) it replaces the days.
DELETION_GRACE_MINUTES = env_int("CKPTFLEET_DELETION_GRACE_MINUTES", 0, minimum=0, maximum=24 * 60)
if DELETION_GRACE_MINUTES and not DEBUG:
    raise ImproperlyConfigured(
        "CKPTFLEET_DELETION_GRACE_MINUTES is for development (CKPTFLEET_DEBUG=1) only: "
        "set CKPTFLEET_DELETION_GRACE_DAYS"
    )
DELETION_APPROVAL_BYTES = env_int("CKPTFLEET_DELETION_APPROVAL_BYTES", 10 * 1024**4, minimum=0)
# Holds: how far ahead a governance hold's Object Lock retention is set (renewed daily once half of it is
# left; S3 retention needs a date and a governance hold has none), and the latest retain-until date a
# compliance hold may be given (10 years: nobody can undo a mistaken date).
HOLD_GOVERNANCE_RETENTION_DAYS = env_int("CKPTFLEET_HOLD_GOVERNANCE_RETENTION_DAYS", 30, minimum=2, maximum=36500)
HOLD_COMPLIANCE_MAX_DAYS = env_int("CKPTFLEET_HOLD_COMPLIANCE_MAX_DAYS", 3653, minimum=1, maximum=36500)
# The earliest: a compliance hold retained for less than this many days is refused (issue 26: one of 70 seconds was
# accepted). One day by default: a hold that lapses within the day protects nothing a legal hold would not, and
# a day is what a regulator's or court's order is counted in; at least 1, at most HOLD_COMPLIANCE_MAX_DAYS.
HOLD_COMPLIANCE_MIN_DAYS = env_int("CKPTFLEET_HOLD_COMPLIANCE_MIN_DAYS", 1, minimum=1, maximum=HOLD_COMPLIANCE_MAX_DAYS)
# Soft delete: an executed deletion first moves what it deletes to a trash for this many days (per location,
# StorageLocation.soft_delete_days overrides it; 0 deletes at once). SOFT_DELETE_REQUIRED (compliance) refuses 0
# everywhere: here, in the location service, the admin and the API.
SOFT_DELETE_DAYS = env_int("CKPTFLEET_SOFT_DELETE_DAYS", 7, minimum=0, maximum=3650)
SOFT_DELETE_REQUIRED = env_bool("CKPTFLEET_SOFT_DELETE_REQUIRED", False)
if SOFT_DELETE_REQUIRED and SOFT_DELETE_DAYS == 0:
    raise ImproperlyConfigured("CKPTFLEET_SOFT_DELETE_REQUIRED=1 refuses CKPTFLEET_SOFT_DELETE_DAYS=0")
# The blast radius of one deletion job: above any of these limits it needs two approvers (neither the person
# who asked): bytes, objects and files, and the share of the run's present bytes it takes, in percent.
BLAST_MAX_BYTES = env_int("CKPTFLEET_BLAST_MAX_BYTES", 100 * 1024**4, minimum=1)
BLAST_MAX_OBJECTS = env_int("CKPTFLEET_BLAST_MAX_OBJECTS", 200_000, minimum=1)
BLAST_MAX_RUN_PERCENT = env_int("CKPTFLEET_BLAST_MAX_RUN_PERCENT", 50, minimum=1, maximum=100)
# The limits count every deletion of the run, and every deletion the same person asked for, scheduled within
# this many hours, whatever the number of jobs (issue 26: four jobs of 20% of a run each passed a 50% limit).
BLAST_WINDOW_HOURS = env_int("CKPTFLEET_BLAST_WINDOW_HOURS", 24, minimum=1, maximum=24 * 366)
# Fail closed (promise 12): a policy acts only on checkpoints whose every location had an inventory applied
# within this many hours, and whose last inventory did not fail.
POLICY_EVIDENCE_HOURS = env_int("CKPTFLEET_POLICY_EVIDENCE_HOURS", 48, minimum=1)
# A host whose agent has not called in for this long is "silent": the recovery page does not offer its copies as
# the restore source (the run may have died with it) and says why. An operator can also mark a host down.
# Leases (actions.leases): how short and how long one may be taken or renewed for, in seconds.
LEASE_MIN_SECONDS = env_int("CKPTFLEET_LEASE_MIN_SECONDS", 60, minimum=1)
LEASE_MAX_SECONDS = env_int("CKPTFLEET_LEASE_MAX_SECONDS", 7 * 86400, minimum=60)
HOST_SILENT_MINUTES = env_int("CKPTFLEET_HOST_SILENT_MINUTES", 120, minimum=1)
# Retention lock: how long a locked policy can still be unlocked (AWS Backup Vault Lock's cooling-off,
# 72 h by default there too); after it the policy can only be made stricter. And how long a change
# that waits for a second person's approval stays open before it expires.
POLICY_LOCK_COOLING_OFF_HOURS = env_int("CKPTFLEET_POLICY_LOCK_COOLING_OFF_HOURS", 72, minimum=1, maximum=24 * 366)
CHANGE_REQUEST_EXPIRY_DAYS = env_int("CKPTFLEET_CHANGE_REQUEST_EXPIRY_DAYS", 14, minimum=1, maximum=366)
# A locked policy protects what it keeps (issue 27): deleting a checkpoint it keeps takes this many people, the one
# who asks and approvers other than them, as loosening a policy takes two (the requester and a second person).
# At most 3: a deletion records two approvals beside the person who asked (``actions.models.DeletionJob``).
LOCKED_POLICY_QUORUM = env_int("CKPTFLEET_LOCKED_POLICY_QUORUM", 2, minimum=2, maximum=3)
S3_SECRETS_DIR = Path(env_str("CKPTFLEET_S3_SECRETS_DIR", str(VAR_DIR / "s3-secrets")))
# Promotions pulled by a host's agent: how long each presigned GET URL stays valid, from a minute to the
# seven days SigV4 allows (fleet.s3.PRESIGN_MAX_SECONDS, not imported here: settings load before boto3).
PROMOTION_PRESIGN_SECONDS = env_int("CKPTFLEET_PROMOTION_PRESIGN_SECONDS", 3600, minimum=60)
if PROMOTION_PRESIGN_SECONDS > 7 * 24 * 3600:
    raise ImproperlyConfigured(
        f"CKPTFLEET_PROMOTION_PRESIGN_SECONDS={PROMOTION_PRESIGN_SECONDS} must be at most 604800 (7 days, "
        "the longest a presigned S3 URL is valid)"
    )
# Placement: a finished run's checkpoints still on NVMe this many days after its last checkpoint are flagged.
NVME_FINISHED_DAYS = env_int("CKPTFLEET_NVME_FINISHED_DAYS", 14, minimum=0)
# Run lifecycle: an active run with no new checkpoint for this many days is marked finished, "inferred" (beat,
# daily; catalog.lifecycle). What the job or a person said is never overridden by it.
RUN_IDLE_DAYS = env_int("CKPTFLEET_RUN_IDLE_DAYS", 14, minimum=1, maximum=3660)
# Verification: a verified copy whose checksums were taken more than this many days ago is flagged "not
# verified for N days" (checksums go stale: bit rot, a rewrite the store did not show); at least 1.
VERIFY_STALE_DAYS = env_int("CKPTFLEET_VERIFY_STALE_DAYS", 30, minimum=1)
# Recovery view: per-tier restore throughput and first-byte delay overriding the defaults in
# fleet/restore_assumptions.py, as JSON, e.g. {"archive": {"mib_per_s": 200, "delay_s": 10800}}.
RESTORE_ASSUMPTIONS = _restore_assumptions()
# Restore drills (catalog.drills): each day, per team, this many trusted checkpoints are read back from their coldest
# non-archive object copy, at most this many bytes each, and checked against the recorded checksums; drills of the
# last N days give the measured restore throughput per tier.
RESTORE_DRILL_PER_TEAM = env_int("CKPTFLEET_RESTORE_DRILL_PER_TEAM", 2, minimum=0)
RESTORE_DRILL_MAX_BYTES = env_int("CKPTFLEET_RESTORE_DRILL_MAX_BYTES", 1024**3, minimum=1)
RESTORE_DRILL_MEASURE_DAYS = env_int("CKPTFLEET_RESTORE_DRILL_MEASURE_DAYS", 30, minimum=1)
# Promotions, in the workers: a restore under way is asked about every PROMOTION_POLL_SECONDS, and a job whose
# worker has shown no progress for PROMOTION_LEASE_SECONDS is taken to be lost and sent again (beat looks every
# minute, so a shorter lease would only send live jobs twice).
PROMOTION_POLL_SECONDS = env_int("CKPTFLEET_PROMOTION_POLL_SECONDS", 300, minimum=1)
PROMOTION_LEASE_SECONDS = env_int("CKPTFLEET_PROMOTION_LEASE_SECONDS", 600, minimum=60)
# A move's verification is bounded: a move whose new copy has not verified (its objects against the source's
# checksums, then the catalog's verdict on the new copy) MOVE_VERIFY_HOURS after it began verifying, or after
# MOVE_VERIFY_ATTEMPTS tries that the store did not answer, ends failed with the reason; its source is kept.
MOVE_VERIFY_HOURS = env_int("CKPTFLEET_MOVE_VERIFY_HOURS", 48, minimum=1, maximum=24 * 365)
MOVE_VERIFY_ATTEMPTS = env_int("CKPTFLEET_MOVE_VERIFY_ATTEMPTS", 20, minimum=1, maximum=10_000)
# Server-side copies: an object larger than the threshold is copied in parts of PART_SIZE. S3's own limits bound
# both: CopyObject copies at most 5 GiB, and a part is 5 MiB to 5 GiB. The defaults are fleet.s3's
# MULTIPART_COPY_THRESHOLD and MULTIPART_COPY_PART_SIZE (not imported here: settings load before boto3).
PROMOTION_MULTIPART_THRESHOLD = env_int(
    "CKPTFLEET_PROMOTION_MULTIPART_THRESHOLD", 5 * 1024**3, minimum=0, maximum=5 * 1024**3
)
PROMOTION_MULTIPART_PART_SIZE = env_int(
    "CKPTFLEET_PROMOTION_MULTIPART_PART_SIZE", 512 * 1024**2, minimum=5 * 1024**2, maximum=5 * 1024**3
)
# Offloads pushed by a host's agent: a file larger than the threshold is uploaded in parts of PART_SIZE (the
# server starts the multipart upload, signs one URL per part and completes it); smaller ones with one PUT, which
# S3 takes up to 5 GiB. A part is 5 MiB to 5 GiB, and an upload has at most 10,000 parts.
OFFLOAD_MULTIPART_THRESHOLD = env_int(
    "CKPTFLEET_OFFLOAD_MULTIPART_THRESHOLD", 64 * 1024**2, minimum=0, maximum=5 * 1024**3
)
OFFLOAD_PART_SIZE = env_int("CKPTFLEET_OFFLOAD_PART_SIZE", 64 * 1024**2, minimum=5 * 1024**2, maximum=5 * 1024**3)
# Server-side copies of one promotion or move in flight at once (the store does the work; threads wait on it).
PROMOTION_COPY_CONCURRENCY = env_int("CKPTFLEET_PROMOTION_COPY_CONCURRENCY", 8, minimum=1, maximum=64)
# Tiering what-if: minimum storage durations (days) and request prices (USD per 1,000 PUTs or transitions) by
# storage class, merged over the published defaults in retention/tiering.py.
RETENTION_MIN_STORAGE_DAYS = _by_storage_class(
    "CKPTFLEET_RETENTION_MIN_STORAGE_DAYS", _days, "a whole number of days, 0 or more", '{"GLACIER_IR": 90}'
)
RETENTION_REQUEST_PRICE_PER_1000 = _by_storage_class(
    "CKPTFLEET_RETENTION_REQUEST_PRICE_PER_1000", _price, "a price, 0 or more", '{"DEEP_ARCHIVE": "0.05"}'
)
# manage.py seed_demo also fills demo buckets on this S3-compatible endpoint (scripts/demo sets it).
DEMO_S3_ENDPOINT = env_str("CKPTFLEET_DEMO_S3")
if DEMO_S3_ENDPOINT:
    check_url("CKPTFLEET_DEMO_S3", DEMO_S3_ENDPOINT, {"http", "https"})
# Django's own cap on in-memory request bodies does not apply to the streamed inventory upload.
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024**2
# A refused (413) body up to this size is read and thrown away before the answer, so that clients which send
# their whole body before reading see the 413 (ckptfleet.middleware); a larger one is not read.
CKPTFLEET_BODY_DRAIN_BYTES = env_int("CKPTFLEET_BODY_DRAIN_BYTES", 64 * 1024**2, minimum=0)

# The audit chain's anchors: its head (event count, last hash, time, HMAC signature) written outside the database
# every AUDIT_ANCHOR_MINUTES (and right after every hold and deletion event, audit.services.ANCHOR_AFTER), to a
# directory (a JSON-lines file per month) and/or to an S3 bucket with Object Lock,
# where each anchor object is kept in COMPLIANCE mode for AUDIT_ANCHOR_RETAIN_DAYS. The verifier (beat, every
# AUDIT_VERIFY_MINUTES) checks the chain end to end and against every anchor. In development the directory defaults
# to var/audit-anchors; in production anchors are written only where configured.
AUDIT_ANCHOR_DIR = env_str("CKPTFLEET_AUDIT_ANCHOR_DIR", str(VAR_DIR / "audit-anchors") if DEBUG else "")
AUDIT_ANCHOR_S3 = env_str("CKPTFLEET_AUDIT_ANCHOR_S3")
if AUDIT_ANCHOR_S3:
    check_url("CKPTFLEET_AUDIT_ANCHOR_S3", AUDIT_ANCHOR_S3, {"s3"})
AUDIT_ANCHOR_S3_ENDPOINT = env_str("CKPTFLEET_AUDIT_ANCHOR_S3_ENDPOINT")
if AUDIT_ANCHOR_S3_ENDPOINT:
    check_url("CKPTFLEET_AUDIT_ANCHOR_S3_ENDPOINT", AUDIT_ANCHOR_S3_ENDPOINT, {"http", "https"})
AUDIT_ANCHOR_S3_REGION = env_str("CKPTFLEET_AUDIT_ANCHOR_S3_REGION")
# A credentials reference as for buckets (default, profile:NAME, file:NAME), checked when the client is made.
AUDIT_ANCHOR_S3_CREDENTIALS = env_str("CKPTFLEET_AUDIT_ANCHOR_S3_CREDENTIALS", "default")
AUDIT_ANCHOR_S3_ADDRESSING = env_choice(
    "CKPTFLEET_AUDIT_ANCHOR_S3_ADDRESSING", "auto", frozenset({"auto", "path", "virtual"})
)
AUDIT_ANCHOR_RETAIN_DAYS = env_int("CKPTFLEET_AUDIT_ANCHOR_RETAIN_DAYS", 365, minimum=1, maximum=36500)
AUDIT_ANCHOR_MINUTES = env_int("CKPTFLEET_AUDIT_ANCHOR_MINUTES", 60, minimum=1)
AUDIT_VERIFY_MINUTES = env_int("CKPTFLEET_AUDIT_VERIFY_MINUTES", 60, minimum=1)
# /metrics (Prometheus text format): open like /healthz/ unless a token is set; then "Authorization: Bearer <token>".
METRICS_TOKEN = env_secret("CKPTFLEET_METRICS_TOKEN") or ""

# Access: whom the 403 page of a person without a role names (a team, a channel, an address), and
# whether a person in a "team:<name>" group sees only that team's runs.
CKPTFLEET_ACCESS_CONTACT = env_str("CKPTFLEET_ACCESS_CONTACT", "")
CKPTFLEET_TEAM_SCOPING = env_bool("CKPTFLEET_TEAM_SCOPING", False)

_LOG_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"})
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_choice("LOG_LEVEL", "INFO", _LOG_LEVELS)},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}

# HTTPS, in production (CKPTFLEET_DEBUG=0). The app is taken to be reached over TLS: cookies are Secure, plain
# HTTP is redirected to HTTPS and HSTS tells browsers to stay there. Behind a proxy or load balancer that
# terminates TLS, CKPTFLEET_BEHIND_TLS_PROXY=1 trusts its X-Forwarded-Proto header (the proxy must set it and
# drop any a client sent). Serving plain HTTP (a private network with no TLS anywhere, docker-compose.yml as
# shipped) is a deliberate CKPTFLEET_PLAIN_HTTP=1. The variables are read in development too, so that a bad value
# is refused there as well, but applied only in production.
_plain_http = env_bool("CKPTFLEET_PLAIN_HTTP", False)
_behind_tls_proxy = env_bool("CKPTFLEET_BEHIND_TLS_PROXY", False)
if _plain_http and _behind_tls_proxy:
    raise ImproperlyConfigured(
        "CKPTFLEET_PLAIN_HTTP=1 and CKPTFLEET_BEHIND_TLS_PROXY=1 contradict each other: set the one that is true"
    )
# Off when the proxy in front redirects to HTTPS itself and passes no X-Forwarded-Proto.
_ssl_redirect = env_bool("CKPTFLEET_SSL_REDIRECT", not _plain_http)
if _plain_http and _ssl_redirect:
    raise ImproperlyConfigured(
        "CKPTFLEET_SSL_REDIRECT=1 with CKPTFLEET_PLAIN_HTTP=1 would send every request to an HTTPS that is not there"
    )
# A year, as Django's deployment checklist and hstspreload.org ask; browsers only honour it over HTTPS.
_hsts_seconds = env_int("CKPTFLEET_HSTS_SECONDS", 0 if _plain_http else 365 * 24 * 3600, minimum=0)
_hsts_include_subdomains = env_bool("CKPTFLEET_HSTS_INCLUDE_SUBDOMAINS", True)
# Preloading commits the whole registrable domain to HTTPS in browsers for months: its owner decides, so off.
_hsts_preload = env_bool("CKPTFLEET_HSTS_PRELOAD", False)
_x_frame_options = env_choice("CKPTFLEET_X_FRAME_OPTIONS", "DENY", frozenset({"DENY", "SAMEORIGIN"}))
_referrer_policy = env_choice(
    "CKPTFLEET_REFERRER_POLICY",
    "same-origin",
    frozenset(
        {
            "no-referrer",
            "no-referrer-when-downgrade",
            "origin",
            "origin-when-cross-origin",
            "same-origin",
            "strict-origin",
            "strict-origin-when-cross-origin",
            "unsafe-url",
        }
    ),
)

if not DEBUG:
    SESSION_COOKIE_SECURE = not _plain_http
    CSRF_COOKIE_SECURE = not _plain_http
    SESSION_COOKIE_HTTPONLY = True
    # No script reads the CSRF cookie: the pages' scripts take the token from the form's hidden field
    # (static/js/scan.js) and the API docs page has it rendered in by the server.
    CSRF_COOKIE_HTTPONLY = True
    SECURE_SSL_REDIRECT = _ssl_redirect
    # Compose, Kubernetes and load balancers probe the health check over plain HTTP from inside the network.
    SECURE_REDIRECT_EXEMPT = [r"^healthz/$", r"^metrics$"]
    if _behind_tls_proxy:
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = _hsts_seconds
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _hsts_include_subdomains
    SECURE_HSTS_PRELOAD = _hsts_preload
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_REFERRER_POLICY = _referrer_policy
    X_FRAME_OPTIONS = _x_frame_options
