"""The one settings module. Every knob comes from the environment through `console.env`.

Defaults give the embedded setup of `make run`: SQLite under `var/` (WAL, busy timeout, immediate
transactions) and kombu's filesystem transport as the broker, so web, worker and beat run with no
external service. `DATABASE_URL=postgres://…` and `CELERY_BROKER_URL=amqp://…` switch to the
production services. docs/configuration.md lists every variable.
"""

import ipaddress
import secrets
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
import django_stubs_ext
from django.core.exceptions import ImproperlyConfigured

from console.env import (
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_optional,
    env_str,
    env_url,
    web_concurrency,
)

# Generic admin/model classes (`admin.ModelAdmin[Model]`) at run time, as the type stubs see them.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("CONSOLE_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", False)


def _secret_key() -> str:
    configured = env_optional("DJANGO_SECRET_KEY")
    if configured is not None:
        if len(configured) < 50:
            raise ImproperlyConfigured("DJANGO_SECRET_KEY must be at least 50 characters long")
        return configured
    # The embedded setup keeps a generated key under var/ so sessions survive a restart; a
    # production deployment sets DJANGO_SECRET_KEY (the deploy check refuses anything weak).
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        key_file.write_text(secrets.token_urlsafe(64))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    # ninja as an app serves /api/docs from its own static files, not a CDN (works offline)
    "ninja",
    "telemetry",
    "compaction",
    # alert rules, their history and notifications (issue 34)
    "alerts",
    "console",
    # sign-in throttling (console.limits)
    "axes",
    # the audit trail of policy, price, key and user changes (console.audit)
    "auditlog",
    # the demo scenario and `manage.py simulate` (what `make run` seeds)
    "demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # issue 39: gzip for pages, fragments and API bodies of at least COMPRESS_MIN_BYTES; after
    # WhiteNoise, which serves static files from their precompressed copies itself
    "console.middleware.Compress",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]
MIDDLEWARE.insert(0, "console.middleware.body_limit")
# issue 16: 411 for chunked bodies, 422 for input no view can keep (telemetry.safejson)
MIDDLEWARE.insert(1, "console.middleware.request_guard")
# issue 16: a database outage met by a view answers 503 with Retry-After, not a 500 page
MIDDLEWARE.append("console.middleware.DatabaseUnavailable")
# issue 16: Content-Security-Policy and Permissions-Policy on every response
MIDDLEWARE.insert(2, "console.middleware.security_headers")
MIDDLEWARE.append("console.errors.friendly_405")
# issue 39: pages show their times in the operator's zone (?tz=, else the remembered one)
MIDDLEWARE.append("console.middleware.operator_zone")
# axes: a refused sign-in answers 429 (console.limits.lockout_response); last, as axes asks
MIDDLEWARE.append("axes.middleware.AxesMiddleware")
# issue 41: a request target over MAX_URL_BYTES answers 414 (JSON on the API) before anything
MIDDLEWARE.insert(0, "console.middleware.url_limit")
# issue 39: each audited change names who made it: the signed-in user or "api:<key prefix>"
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
    "console.audit.AuditActorMiddleware",
)

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"

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
                "console.roles.role_context",
            ],
        },
    },
]

# --- Database --------------------------------------------------------------------------------
_SQLITE_PATH = VAR_DIR / "console.sqlite3"
DATABASE_URL = env_url(
    "DATABASE_URL",
    f"sqlite:///{_SQLITE_PATH}",
    schemes=("sqlite", "postgres", "postgresql", "pgsql"),
)
_db: dict[str, Any] = dict(
    dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0))
)
if _db["ENGINE"] == "django.db.backends.sqlite3":
    Path(str(_db["NAME"])).parent.mkdir(parents=True, exist_ok=True)
    # Web, worker and beat share one file: WAL lets readers run beside the writer, the busy
    # timeout makes a writer wait instead of failing, and IMMEDIATE transactions take the write
    # lock up front so two writers never deadlock upgrading a read lock ("database is locked").
    _db["CONN_MAX_AGE"] = 0
    _db["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": (
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=30000;"
        ),
    }
    _db.setdefault("TEST", {})["NAME"] = str(VAR_DIR / "test_console.sqlite3")
else:
    # Django's backend with a health check that skips the `SELECT 1` round trip while the
    # connection is idle and the server has sent nothing (`console.postgres.base`).
    _db["ENGINE"] = "console.postgres"
    _db["CONN_HEALTH_CHECKS"] = True
    # Opt-in: values travel beside the statement (psycopg's server-side binding), so a statement
    # whose text repeats is prepared once per connection after `prepare_threshold` runs and
    # skips PostgreSQL's parse and plan (less backend CPU a record, docs/performance.md).
    # Not the default: a statement then carries at most 65,535 parameters, and
    # Django 5.2 does not split its `IN` lists and bulk batches on PostgreSQL, so deleting a
    # session of more calls than that fails (tests/db/test_large_session_delete.py); prepared
    # statements also need a pooler that supports them (PgBouncer >= 1.21 in transaction mode).
    if env_bool("DB_SERVER_SIDE_BINDING", False):
        _db["OPTIONS"] = {"server_side_binding": True, "prepare_threshold": 5}
# What sits between the console and PostgreSQL (docs/scaling.md): nothing or a session-mode pool
# (""), or PgBouncer in transaction mode ("pgbouncer-transaction"), where consecutive
# transactions of one connection may run on different server connections. That switch turns
# off what only holds on one server connection: server-side cursors (`.iterator()` would
# FETCH from a cursor another server connection declared), prepared statements (PgBouncer
# before 1.21 does not track them; DB_PREPARED_STATEMENTS=true turns them back on for a
# PgBouncer with `max_prepared_statements`), pipelining, and the compaction lock's
# session-level advisory lock (`compaction.services.compaction_lock` then holds a
# transaction-level one on a connection of its own for the compaction's duration).
DATABASE_POOLER = env_choice("DATABASE_POOLER", "", ("", "pgbouncer-transaction"))
_TRANSACTION_POOLER = DATABASE_POOLER == "pgbouncer-transaction"
if _TRANSACTION_POOLER:
    if _db["ENGINE"] == "django.db.backends.sqlite3":
        raise ImproperlyConfigured("DATABASE_POOLER needs a PostgreSQL DATABASE_URL")
    if env_bool("DB_SERVER_SIDE_BINDING", False):
        raise ImproperlyConfigured(
            "DB_SERVER_SIDE_BINDING prepares Django's statements, which "
            "DATABASE_POOLER=pgbouncer-transaction cannot carry: leave it off"
        )
    _db["DISABLE_SERVER_SIDE_CURSORS"] = True
# Read-only console pages (`console.replica`) read from this PostgreSQL replica when it is set;
# writes and every other read go to DATABASE_URL (`console.routers.ReplicaRouter`).
DATABASE_REPLICA_URL = env_optional("DATABASE_REPLICA_URL")
# The alias the router sends replica reads to; None: no replica, every read goes to the primary.
REPLICA_DATABASE: str | None = None
DATABASES = {"default": _db}
if DATABASE_REPLICA_URL is not None:
    if _db["ENGINE"] == "django.db.backends.sqlite3":
        raise ImproperlyConfigured("DATABASE_REPLICA_URL needs a PostgreSQL DATABASE_URL")
    env_url("DATABASE_REPLICA_URL", "", schemes=("postgres", "postgresql", "pgsql"))
    _replica: dict[str, Any] = dict(
        dj_database_url.parse(DATABASE_REPLICA_URL, conn_max_age=int(_db["CONN_MAX_AGE"] or 0))
    )
    for _name in ("ENGINE", "CONN_HEALTH_CHECKS", "OPTIONS", "DISABLE_SERVER_SIDE_CURSORS"):
        if _name in _db:
            _replica[_name] = _db[_name]
    # Tests never create a replica database: the alias reads the test database.
    _replica["TEST"] = {"MIRROR": "default"}
    DATABASES["replica"] = _replica
    REPLICA_DATABASE = "replica"
DATABASE_ROUTERS = ["console.routers.ReplicaRouter"]
# PostgreSQL: ingest's own statements (`telemetry.ingest.statements.run`) are prepared once per
# connection whatever DB_SERVER_SIDE_BINDING says (their values never near the 65,535-parameter limit).
# Off for a pooler without prepared-statement support (PgBouncer < 1.21 in transaction mode),
# and by default behind DATABASE_POOLER=pgbouncer-transaction.
DB_PREPARED_STATEMENTS = env_bool("DB_PREPARED_STATEMENTS", not _TRANSACTION_POOLER)
# PostgreSQL: those prepared statements go through libpq directly, the transaction's BEGIN (and
# a single record's COMMIT) in the same round trip (libpq's pipeline mode,
# `telemetry.ingest.pg_prepared`).
# Off for a pooler that does not pass pipelined messages through; psycopg's cursor then runs them.
DB_PIPELINE = env_bool("DB_PIPELINE", not _TRANSACTION_POOLER)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Web processes (`console.wsgi`): the garbage collector's youngest-generation threshold, with
# everything loaded at start-up frozen (`console.collector`); 0 keeps CPython's defaults.
WEB_GC_THRESHOLD = env_int("WEB_GC_THRESHOLD", 50_000, minimum=0)
# Celery pool processes (compactions, archives, alert evaluation) run this much nicer than the
# web processes (`console.celery`): on a machine they share, ingest keeps its share of the CPU
# while a compaction runs (make bench P7). 0 leaves their priority as started.
WORKER_NICE = env_int("WORKER_NICE", 10, minimum=0, maximum=19)

# --- Auth, i18n, static ----------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Sign-in throttling by django-axes (console.limits): failed sign-ins for one account from one
# client address, and from one address over all accounts, within the cool-off window. Counted
# per address and account together, so nobody elsewhere can lock an account's owner out.
LOGIN_FAILURES_PER_ACCOUNT = env_int("LOGIN_FAILURES_PER_ACCOUNT", 5, minimum=1)
LOGIN_FAILURES_PER_ADDRESS = env_int("LOGIN_FAILURES_PER_ADDRESS", 20, minimum=1)
LOGIN_LOCKOUT_SECONDS = env_int("LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
AUTHENTICATION_BACKENDS = [
    "console.limits.SignInBackend",  # axes' gate first: a locked sign-in never checks a password
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = "console.limits.SignInHandler"
AXES_LOCKOUT_PARAMETERS = [["ip_address", "username"]]
AXES_FAILURE_LIMIT = LOGIN_FAILURES_PER_ACCOUNT
AXES_COOLOFF_TIME = timedelta(seconds=LOGIN_LOCKOUT_SECONDS)
AXES_CLIENT_IP_CALLABLE = "console.limits.client_address"
AXES_USERNAME_CALLABLE = "console.limits.account_name"
AXES_LOCKOUT_CALLABLE = "console.limits.lockout_response"
AXES_RESET_ON_SUCCESS = True
# A refused attempt is not counted again: the cool-off runs from the lockout, and a locked
# client's guesses cost no write.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# Only failures are kept (and only for the cool-off window); no row for every sign-in forever.
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False
# The audit trail (django-auditlog; docs/operating.md "Audit trail"): who changed a policy, a
# price, a profile, an agent key, a user or a group, when, and each field before → after.
# A key's hash and a user's password hash are never recorded (excluded / shown as "(hidden)");
# bookkeeping fields that change on every use (last used, last sign-in, updated at) are not
# changes anyone made.
AUDITLOG_STORE_JSON_CHANGES = True
AUDITLOG_MASK_CALLABLE = "console.audit.hidden"
AUDITLOG_INCLUDE_TRACKING_MODELS = (
    {"model": "telemetry.policy", "exclude_fields": ["updated_at"]},
    {"model": "telemetry.cataloguemodel", "exclude_fields": ["updated_at"]},
    {"model": "telemetry.agentprofile", "exclude_fields": ["created_at"]},
    {"model": "telemetry.agentkey", "exclude_fields": ["key_hash", "last_used_at", "created_at"]},
    {
        "model": "auth.user",
        "exclude_fields": ["last_login", "date_joined"],
        "mask_fields": ["password"],
        "m2m_fields": ["groups", "user_permissions"],
    },
    {"model": "auth.group", "m2m_fields": ["permissions"]},
    # operators' tags on sessions: who added or removed which tag, when
    {"model": "telemetry.sessiontag", "exclude_fields": ["created_at"]},
)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js straight from the plotly package (no CDN, works offline)
    "console.staticfinders.PlotlyFinder",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# --- Security (production defaults; `manage.py check --deploy` passes with DEBUG off) ---------
# `make run` serves plain http on this machine with DEBUG off (no debug pages, static files
# compressed and cached for good): CONSOLE_LOCAL_HTTP=true turns only the HTTPS defaults off.
LOCAL_HTTP = env_bool("CONSOLE_LOCAL_HTTP", False)
_secure = not DEBUG and not LOCAL_HTTP
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", _secure)
SESSION_COOKIE_SECURE = env_bool("DJANGO_SESSION_COOKIE_SECURE", _secure)
CSRF_COOKIE_SECURE = env_bool("DJANGO_CSRF_COOKIE_SECURE", _secure)
SECURE_HSTS_SECONDS = env_int("DJANGO_SECURE_HSTS_SECONDS", 31_536_000 if _secure else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", _secure)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", _secure)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
BEHIND_PROXY = env_bool("DJANGO_BEHIND_PROXY", False)
if BEHIND_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# The proxies whose X-Forwarded-Proto gunicorn believes (console.gunicorn_conf) are the ones whose
# X-Forwarded-For sign-in throttling believes (console.limits.client_address); nobody's without
# DJANGO_BEHIND_PROXY.
FORWARDED_ALLOW_IPS = env_list("FORWARDED_ALLOW_IPS", ["127.0.0.1", "::1"])
for _proxy in FORWARDED_ALLOW_IPS:
    if _proxy != "*":
        try:
            ipaddress.ip_network(_proxy, strict=False)
        except ValueError:
            raise ImproperlyConfigured(
                f"FORWARDED_ALLOW_IPS must list addresses or networks (or *), got {_proxy!r}"
            ) from None
# The API must take large transcript appends (at least 32 MB, D3). `console.middleware` answers
# 413 per route before a body is read; Django's own cap stays as the backstop for the rest.
MAX_REQUEST_BYTES = env_int("CONSOLE_MAX_REQUEST_BYTES", 32 * 1024 * 1024, minimum=1024 * 1024)
TELEMETRY_MAX_REQUEST_BYTES = env_int(
    "TELEMETRY_MAX_REQUEST_BYTES", 8 * 1024 * 1024, minimum=64 * 1024
)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES
# An OTLP export is bounded like a JSON API batch: at most this many spans or log records (the
# JSON API's MAX_BATCH, telemetry.schemas; the OTel SDKs export 512 at a time), counted before
# any is decoded, and at most this many bytes once its gzip or deflate is undone (inflated
# only that far), so a small body cannot cost a worker more than the cap's worth of work.
OTLP_MAX_ITEMS_PER_EXPORT = env_int("OTLP_MAX_ITEMS_PER_EXPORT", 1000, minimum=1)
OTLP_MAX_DECODED_BYTES = env_int("OTLP_MAX_DECODED_BYTES", 16 * 1024 * 1024, minimum=64 * 1024)
# How far into the future a record's `at` may be (agents' clocks drift; a day is generous).
TELEMETRY_CLOCK_SKEW_SECONDS = env_int("TELEMETRY_CLOCK_SKEW_SECONDS", 24 * 60 * 60, minimum=0)
DATA_UPLOAD_MAX_NUMBER_FIELDS = 10_000
# The longest request target (path and query string) any request may have: longer answers 414
# (JSON on /api/). gunicorn's own line limit sits above it (console.gunicorn_conf), so this
# cap, not gunicorn's HTML page, is what a client meets.
# issue 39: bodies smaller than this go out uncompressed (gzip's header and padding outweigh it)
COMPRESS_MIN_BYTES = env_int("CONSOLE_COMPRESS_MIN_BYTES", 1024, minimum=200)
MAX_URL_BYTES = env_int("CONSOLE_MAX_URL_BYTES", 8000, minimum=1024, maximum=65_536)
# How long `/healthz` answers unhealthy after a write was refused for a full database.
DATABASE_FULL_HEALTH_SECONDS = env_int("DATABASE_FULL_HEALTH_SECONDS", 60, minimum=0)

# --- Celery ------------------------------------------------------------------------------------
_BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = env_url(
    "CELERY_BROKER_URL", "filesystem://", schemes=("filesystem", "amqp", "amqps", "redis", "rediss")
)
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    # The embedded broker: kombu's filesystem transport crosses processes (memory:// does not).
    for sub in ("queue", "processed", "control"):
        (_BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_BROKER_DIR / "queue"),
        "data_folder_out": str(_BROKER_DIR / "queue"),
        "processed_folder": str(_BROKER_DIR / "processed"),
        "store_processed": False,
        "control_folder": str(_BROKER_DIR / "control"),
    }
# The longest a compaction job may run (Celery kills it past this); the broker must not hand an
# unacknowledged job to another worker before it: Redis's visibility timeout is set above it,
# and RabbitMQ's consumer_timeout (30 min by default) must stay above it too.
COMPACTION_JOB_TIME_LIMIT = env_int("COMPACTION_JOB_TIME_LIMIT_SECONDS", 600, minimum=10)
# A failing job is retried by Celery (exponential backoff from this many seconds), then failed.
COMPACTION_JOB_MAX_RETRIES = env_int("COMPACTION_JOB_MAX_RETRIES", 3, minimum=0, maximum=20)
COMPACTION_JOB_RETRY_BACKOFF_SECONDS = env_int("COMPACTION_JOB_RETRY_BACKOFF_SECONDS", 2, minimum=1)
# A relief job that failed for good is tried again by the sweeper after RELIEF_RETRY_BASE_SECONDS,
# doubling per failure, until RELIEF_RETRY_MAX_ATTEMPTS failed in a row: then it gives up, loudly
# (`compaction.relief_state`).
RELIEF_RETRY_BASE_SECONDS = env_int("RELIEF_RETRY_BASE_SECONDS", 60, minimum=1)
RELIEF_RETRY_MAX_ATTEMPTS = env_int("RELIEF_RETRY_MAX_ATTEMPTS", 5, minimum=1, maximum=30)
# A relief job asked for longer ago than this and not finished is flagged as pending too long
# (the sessions list, the overview, `/metrics`).
RELIEF_PENDING_TOO_LONG_SECONDS = env_int(
    "RELIEF_PENDING_TOO_LONG_SECONDS", 300, minimum=1, maximum=86_400
)
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    _VISIBILITY = env_int(
        "CELERY_VISIBILITY_TIMEOUT_SECONDS", COMPACTION_JOB_TIME_LIMIT + 300, minimum=2
    )
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": _VISIBILITY,
        # how often a worker returns unacknowledged jobs past the visibility timeout
        "unacked_restore_interval": 1 if _VISIBILITY < 600 else 10,
        "unacked_restore_throttle": 1 if _VISIBILITY < 600 else 10,
        # a frozen Redis (TCP still accepting) must fail a publish, not hang it
        "socket_timeout": env_int("CELERY_BROKER_SOCKET_TIMEOUT_SECONDS", 5, minimum=1),
        "socket_connect_timeout": 2,
    }
# A publish must never hang a request when the broker is down: bounded retries, short timeouts.
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": 2,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "console")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ALWAYS_EAGER = False
CELERY_WORKER_CONCURRENCY = env_int("CELERY_WORKER_CONCURRENCY", 1, minimum=1, maximum=64)
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
# A session with no call for this long has its calls and turns packed on PostgreSQL
# (`telemetry.packing`, docs/scaling.md); its next call unpacks it. 0: never pack.
TELEMETRY_PACK_IDLE_SECONDS = env_int("TELEMETRY_PACK_IDLE_SECONDS", 3600, minimum=0)
# How often beat looks for runs left `running` by a process that died (compaction.recovery).
COMPACTION_RECOVERY_INTERVAL_SECONDS = env_int(
    "COMPACTION_RECOVERY_INTERVAL_SECONDS", 20, minimum=1, maximum=3600
)
# How often beat runs the sweeper: sessions over their threshold not yet asked, lost jobs, and
# failed relief whose backoff has passed (compaction.sweeper).
COMPACTION_SWEEP_INTERVAL_SECONDS = env_int(
    "COMPACTION_SWEEP_INTERVAL_SECONDS", 60, minimum=1, maximum=3600
)
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "worker-heartbeat": {"task": "telemetry.record_heartbeat", "schedule": 30.0},
    "compaction-sweep": {
        "task": "compaction.sweep",
        "schedule": float(COMPACTION_SWEEP_INTERVAL_SECONDS),
    },
    "compaction-recover-runs": {
        "task": "compaction.recover_runs",
        "schedule": float(COMPACTION_RECOVERY_INTERVAL_SECONDS),
    },
    "archive-retention": {"task": "compaction.purge_archives", "schedule": 3600.0},
    "call-retention": {"task": "telemetry.apply_retention", "schedule": 3600.0},
    "log-retention": {"task": "compaction.apply_log_retention", "schedule": 3600.0},
    "call-packing": {"task": "telemetry.pack_idle_sessions", "schedule": 600.0},
}
# How often beat evaluates every alert rule (docs/alerts.md).
ALERTS_EVALUATE_SECONDS = env_int("ALERTS_EVALUATE_SECONDS", 60, minimum=5, maximum=3600)
CELERY_BEAT_SCHEDULE["alerts-evaluate"] = {
    "task": "alerts.evaluate",
    "schedule": float(ALERTS_EVALUATE_SECONDS),
}
CELERY_TIMEZONE = "UTC"

# Ingest enqueues automatic relief when a session crosses prune_threshold (D4, D5).
COMPACTION_AUTO_ENQUEUE = env_bool("COMPACTION_AUTO_ENQUEUE", True)
# The knowledge store for archives (D5); `compaction.archives.FailingArchive` simulates an outage.
COMPACTION_ARCHIVE_BACKEND = env_str(
    "COMPACTION_ARCHIVE_BACKEND", "compaction.archives.DatabaseArchive"
)
# Characters of parsed transcript logs each process keeps (`compaction.log_cache.LogCache`:
# ~2.6 bytes a character, so 8M is ~21 MB per gunicorn worker or Celery process); 0: none.
COMPACTION_LOG_CACHE_CHARS = env_int("COMPACTION_LOG_CACHE_CHARS", 8_000_000, minimum=0)
# Summaries are extractive and offline unless an LLM endpoint is configured.
COMPACTION_SUMMARIZER_URL = env_optional("COMPACTION_SUMMARIZER_URL")
COMPACTION_SUMMARIZER_API = env_choice(
    "COMPACTION_SUMMARIZER_API", "anthropic", ("anthropic", "openai")
)
COMPACTION_SUMMARIZER_MODEL = env_str("COMPACTION_SUMMARIZER_MODEL", "claude-haiku-4-5")
COMPACTION_SUMMARIZER_KEY = env_str("COMPACTION_SUMMARIZER_KEY", "")

# --- Alerts (docs/alerts.md) ------------------------------------------------------------------
# Evaluate per-session rules right after ingest (a job; never on the request path).
ALERTS_NUDGE = env_bool("ALERTS_NUDGE", True)
# Receivers on loopback/private addresses are refused (SSRF) unless this is set (local use, tests).
ALERTS_ALLOW_PRIVATE_URLS = env_bool("ALERTS_ALLOW_PRIVATE_URLS", False)
# Plain-http receivers are refused unless DEBUG, or this is set false.
ALERTS_REQUIRE_HTTPS = env_bool("ALERTS_REQUIRE_HTTPS", not DEBUG)
ALERTS_DELIVERY_TIMEOUT_SECONDS = env_int(
    "ALERTS_DELIVERY_TIMEOUT_SECONDS", 10, minimum=1, maximum=120
)
ALERTS_DELIVERY_MAX_ATTEMPTS = env_int("ALERTS_DELIVERY_MAX_ATTEMPTS", 6, minimum=1, maximum=50)
ALERTS_RETRY_BACKOFF_SECONDS = env_int("ALERTS_RETRY_BACKOFF_SECONDS", 30, minimum=1)
ALERTS_RETRY_BACKOFF_MAX_SECONDS = env_int("ALERTS_RETRY_BACKOFF_MAX_SECONDS", 1800, minimum=1)
# Links in notifications start with this (e.g. https://console.example.com); "" gives paths.
ALERTS_CONSOLE_URL = env_str("ALERTS_CONSOLE_URL", "")
# Email notifications go through Django's email backend (SMTP unless EMAIL_BACKEND says otherwise).
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT_SECONDS", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "context-console@localhost")

# `/metrics` is open unless a token is set (then scrapers send `Authorization: Bearer <token>`).
METRICS_TOKEN = env_optional("METRICS_TOKEN")

# --- API ---------------------------------------------------------------------------------------
# Requests per minute one agent key may make; one key cannot starve the others.
API_RATE_LIMIT_PER_MINUTE = env_int("API_RATE_LIMIT_PER_MINUTE", 6000, minimum=1)
# The web processes sharing that budget: while the shared cache is down each counts its own
# share of it (telemetry.ratelimit).
WEB_PROCESSES = web_concurrency()
NINJA_PAGINATION_PER_PAGE = 100

# --- Logging -----------------------------------------------------------------------------------
LOG_LEVEL = env_choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # axes: a warning for each failed sign-in, not its info lines around it
    "loggers": {"django.db.backends": {"level": "WARNING"}, "axes": {"level": "WARNING"}},
}

# The cache holds rate-limit counters and nothing that must survive: in-process by default,
# Redis when `CACHE_URL=redis://…` so every web process shares one count per key.
CACHE_URL = env_optional("CACHE_URL")
if CACHE_URL is not None:
    env_url("CACHE_URL", CACHE_URL, schemes=("redis", "rediss"))
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CACHE_URL,
            # Counters on a nearby Redis answer in well under a millisecond: a stopped or
            # frozen one fails an operation within these bounds, and the counters fall back to
            # the process (telemetry.shared_cache) instead of holding the request.
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
        }
    }
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "console",
        }
    }
